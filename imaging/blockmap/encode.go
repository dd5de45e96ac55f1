package blockmap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The binary form of a map, for sending it to the nodes: "DMP1", then
// uvarints Size, BlockSize, len(FS), FS, the extent count, and for each
// extent the gap since the previous one's end and its length.
var mapMagic = [4]byte{'D', 'M', 'P', '1'}

// Encode returns the binary form of m, in at most limit bytes. A map too
// long for that is coarsened first: free gaps, shortest first, are counted
// as used until it fits. The result may then call some free bytes used,
// never a used byte free.
func (m Map) Encode(limit int) ([]byte, error) {
	gap := max(m.BlockSize, 1)
	for {
		b := m.marshal()
		if len(b) <= limit {
			return b, nil
		}
		if len(m.Used) <= 1 {
			return nil, fmt.Errorf("block map of %d bytes does not fit in %d", len(b), limit)
		}
		gap *= 4
		m = m.closeGaps(gap)
	}
}

// closeGaps counts every free gap shorter than gap as used.
func (m Map) closeGaps(gap int64) Map {
	out := m
	out.Used = nil
	for _, e := range m.Used {
		if n := len(out.Used); n > 0 && e.Off-out.Used[n-1].End() < gap {
			out.Used[n-1].Len = e.End() - out.Used[n-1].Off
			continue
		}
		out.Used = append(out.Used, e)
	}
	return out
}

// maxFSName bounds the file system's name in the binary form: a disk of
// many partitions names them all, and the name is only for people.
const maxFSName = 64

func (m Map) marshal() []byte {
	if len(m.FS) > maxFSName {
		m.FS = m.FS[:maxFSName-3] + "..."
	}
	b := append([]byte(nil), mapMagic[:]...)
	b = binary.AppendUvarint(b, uint64(m.Size))
	b = binary.AppendUvarint(b, uint64(m.BlockSize))
	b = binary.AppendUvarint(b, uint64(len(m.FS)))
	b = append(b, m.FS...)
	b = binary.AppendUvarint(b, uint64(len(m.Used)))
	var end int64
	for _, e := range m.Used {
		b = binary.AppendUvarint(b, uint64(e.Off-end))
		b = binary.AppendUvarint(b, uint64(e.Len))
		end = e.End()
	}
	return b
}

var errBadEncoding = errors.New("malformed block map")

// Decode reads a map Encode wrote, checking that its extents are sorted,
// disjoint and within its size.
func Decode(b []byte) (Map, error) {
	var m Map
	if len(b) < len(mapMagic) || string(b[:len(mapMagic)]) != string(mapMagic[:]) {
		return m, fmt.Errorf("%w: no map header", errBadEncoding)
	}
	b = b[len(mapMagic):]
	next := func(what string) (int64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<60 { // 1 EiB: sums of two never overflow
			return 0, fmt.Errorf("%w: bad %s", errBadEncoding, what)
		}
		b = b[n:]
		return int64(v), nil
	}
	var err error
	if m.Size, err = next("size"); err != nil {
		return m, err
	}
	if m.BlockSize, err = next("block size"); err != nil {
		return m, err
	}
	fsLen, err := next("file system name")
	if err != nil || fsLen > int64(len(b)) || fsLen > maxFSName {
		return m, fmt.Errorf("%w: bad file system name", errBadEncoding)
	}
	m.FS, b = string(b[:fsLen]), b[fsLen:]
	count, err := next("extent count")
	if err != nil {
		return m, err
	}
	if count > int64(len(b))/2 { // each extent takes two bytes at least
		return m, fmt.Errorf("%w: %d extents in %d bytes", errBadEncoding, count, len(b))
	}
	m.Used = make([]Extent, 0, count)
	var end int64
	for i := range count {
		gap, err := next("extent gap")
		if err != nil {
			return m, err
		}
		n, err := next("extent length")
		if err != nil {
			return m, err
		}
		e := Extent{Off: end + gap, Len: n}
		if n == 0 || (i > 0 && gap == 0) || e.End() > m.Size || e.End() < e.Off {
			return m, fmt.Errorf("%w: extent %d (%d+%d) out of order or past the size %d", errBadEncoding, i, e.Off, e.Len, m.Size)
		}
		m.Used = append(m.Used, e)
		end = e.End()
	}
	if len(b) != 0 {
		return m, fmt.Errorf("%w: %d bytes past its end", errBadEncoding, len(b))
	}
	return m, nil
}
