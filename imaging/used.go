package imaging

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"dolly/imaging/blockmap"
	"dolly/internal/units"
)

// A raw image of a file system is cast as the file system uses it: the
// blocks its allocation bitmaps mark free hold whatever was there before
// (files deleted since, an earlier install), which nobody needs. Read
// through a map (UseMap), the image's free blocks read as zeros without
// being read, so the stream sends them as zero runs (a target writes them
// as zeros) and its digest covers zeros there: every block in use is
// verified, and nothing of the old free space is sent.

// UseMap has the image read as m says its file system uses it. Only a raw
// image of m's size can be mapped.
func (im *Image) UseMap(m blockmap.Map) error {
	if im.Encoding != Raw {
		return fmt.Errorf("image %s is %s: only a raw image is read through a block map", im.Path, im.Encoding)
	}
	if m.Size != im.Size {
		return fmt.Errorf("image %s: a block map of %d bytes for an image of %d", im.Path, m.Size, im.Size)
	}
	im.used = &m
	return nil
}

// UsedMap is the map the image is read through, nil if none.
func (im *Image) UsedMap() *blockmap.Map { return im.used }

// ReadMap maps the file system of the image (blockmap.Read).
// blockmap.ErrUnknown says it holds none the map knows. A raw image's
// file is read where the map needs it; a compressed one is decoded from
// its start up to there (decodedAt), once scanned (its size known).
func (im *Image) ReadMap() (blockmap.Map, error) {
	if im.Encoding.Compressed() {
		return im.readDecodedMap(mapDecodeBudget(im.Size))
	}
	m, err := blockmap.Read(im.f, im.Size)
	if err != nil {
		return m, fmt.Errorf("image %s: %w", im.Path, err)
	}
	return m, nil
}

// readDecodedMap maps a compressed image, decoding at most budget bytes.
func (im *Image) readDecodedMap(budget int64) (blockmap.Map, error) {
	if im.Size == 0 {
		return blockmap.Map{}, fmt.Errorf("image %s: not scanned yet: %w", im.Path, blockmap.ErrUnknown)
	}
	d := &decodedAt{im: im, budget: budget}
	defer d.close()
	m, err := blockmap.Read(d, im.Size)
	if d.over {
		return blockmap.Map{}, tooFarError{path: im.Path, budget: budget}
	}
	if err != nil {
		return m, fmt.Errorf("image %s: %w", im.Path, err)
	}
	return m, nil
}

// ErrMapTooFar says a compressed image was not mapped: it would have to
// be decoded too far (mapDecodeBudget). It comes with blockmap.ErrUnknown.
var ErrMapTooFar = errors.New("not mapped")

// tooFarError is ErrMapTooFar for one image, and blockmap.ErrUnknown:
// the cast goes on as for an image without a map.
type tooFarError struct {
	path   string
	budget int64
}

func (e tooFarError) Error() string {
	return fmt.Sprintf("image %s: %v: its file system keeps its records further in than %s", e.path, ErrMapTooFar, units.FormatBytes(e.budget))
}

func (e tooFarError) Unwrap() []error { return []error{ErrMapTooFar, blockmap.ErrUnknown} }

// mapDecodeBudget bounds what mapping a compressed image of size bytes may
// decode: a quarter of the image, and at least 1 GiB. A file system keeps
// its allocation records near its start (ext4's flex groups, FAT) or in
// a few places read mostly in order (NTFS), so a map usually costs a
// small part of one pass; one that would cost more is not worth the
// time it adds to every cast of a large image.
func mapDecodeBudget(size int64) int64 { return max(size/4, 1<<30) }

// decodedAt reads a compressed image's raw bytes at any offset, decoding
// the stream from its start: a read further on goes on from where the last
// one ended, and a read further back starts over. It decodes at most
// budget bytes in all, and says so (over).
type decodedAt struct {
	im     *Image
	dec    io.ReadCloser
	pos    int64 // the raw offset dec reads next
	budget int64
	over   bool
}

func (d *decodedAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= d.im.Size {
		return 0, io.EOF
	}
	if d.dec == nil || off < d.pos {
		d.close()
		dec, err := NewStreamDecoder(d.im.Encoding, d.im.Stream())
		if err != nil {
			return 0, err
		}
		d.dec, d.pos = dec, 0
	}
	want := min(int64(len(p)), d.im.Size-off)
	if off-d.pos+want > d.budget {
		d.over = true
		return 0, errors.New("decoding too much of the image to map it")
	}
	d.budget -= off - d.pos + want
	skipped, err := io.CopyN(io.Discard, d.dec, off-d.pos)
	d.pos += skipped
	if err != nil {
		return 0, fmt.Errorf("decoding the image up to %d: %w", off, err)
	}
	n, err := io.ReadFull(d.dec, p[:want])
	d.pos += int64(n)
	if err != nil {
		return n, fmt.Errorf("decoding the image at %d: %w", off, err)
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

func (d *decodedAt) close() {
	if d.dec != nil {
		d.dec.Close()
		d.dec = nil
	}
}

// readUsed reads p at off as the map says: free bytes are zeros, unread.
func (im *Image) readUsed(p []byte, off int64) (int, error) {
	if off >= im.StreamSize {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off < im.StreamSize {
		start, end := im.used.NextUsed(off)
		want := min(int64(len(p)-n), im.StreamSize-off)
		if start > off { // free: zeros
			k := min(want, start-off)
			clear(p[n : n+int(k)])
			n, off = n+int(k), off+k
			continue
		}
		k := min(want, end-off)
		got, err := im.f.ReadAt(p[n:n+int(k)], off)
		n, off = n+got, off+int64(got)
		if err != nil && !(errors.Is(err, io.EOF) && off == im.StreamSize) {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// usedMapDigest identifies a map for the image's fingerprint: a cast
// resumed under another map would carry other bytes under the same keys.
func usedMapDigest(m *blockmap.Map) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %d %d\n", m.FS, m.BlockSize, m.Size)
	for _, e := range m.Used {
		fmt.Fprintf(h, "%d %d\n", e.Off, e.Len)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// nextUsedData is NextData through the map: the next byte both in use and
// stored in the file, and where that run ends.
func (im *Image) nextUsedData(off int64) (data, hole int64, ok bool) {
	size := im.StreamSize
	// A used run that is all a hole of the file is zeros either way: go
	// on from the file's next stored byte. Bounded: past it the next used
	// byte is read, holes and all, which costs time, not correctness.
	for range 64 {
		start, end := im.used.NextUsed(off)
		if start >= size {
			return size, size, true
		}
		d, h, fileOK := nextData(im.f, start, size)
		if !fileOK {
			return start, end, true
		}
		if d < end {
			return d, min(h, end), true
		}
		off = d
	}
	start, end := im.used.NextUsed(off)
	return start, end, true
}

// FreeAsZeros reads r, the raw bytes of the image m maps from its start,
// with the bytes m counts free read as zeros: what a raw image read
// through m yields (UseMap), for an image that is decoded instead.
func FreeAsZeros(r io.Reader, m blockmap.Map) io.Reader {
	return &freeAsZeros{r: r, m: m}
}

type freeAsZeros struct {
	r   io.Reader
	m   blockmap.Map
	off int64
}

func (z *freeAsZeros) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	for at := z.off; at < z.off+int64(n); {
		if at >= z.m.Size { // past the map's end: kept as read
			break
		}
		start, end := z.m.NextUsed(at)
		clear(p[at-z.off : min(start, z.off+int64(n))-z.off])
		at = end
	}
	z.off += int64(n)
	return n, err
}
