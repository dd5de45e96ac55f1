package imaging

import (
	"encoding/binary"
	"fmt"

	"dolly/imaging/blockmap"
)

// A captured image (dolly capture) is a zstd file that opens with a
// skippable frame (RFC 8878, 3.1.2) holding the block map of the disk it
// was captured from: zstd's tools and every decoder skip it, and the
// server hands it to the nodes, which then need not write the free
// blocks. The image's free blocks are zeros, compressed away.

// mapFrameMagic is the skippable frame's magic: 0x184D2A5? with its own
// last nibble.
const mapFrameMagic = 0x184D2A5D

// maxStoredMap bounds the map a captured image holds.
const maxStoredMap = 16 << 20

// MapFrame is the skippable frame that holds m, to open a zstd image with.
func MapFrame(m blockmap.Map) ([]byte, error) {
	b, err := m.Encode(maxStoredMap)
	if err != nil {
		return nil, err
	}
	out := binary.LittleEndian.AppendUint32(nil, mapFrameMagic)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
	return append(out, b...), nil
}

// StoredMap is the block map a zstd image holds in its first frame, nil if
// it holds none.
func (im *Image) StoredMap() (*blockmap.Map, error) {
	if im.Encoding != Zstd {
		return nil, nil
	}
	var head [8]byte
	if n, _ := im.f.ReadAt(head[:], 0); n < len(head) || binary.LittleEndian.Uint32(head[:]) != mapFrameMagic {
		return nil, nil
	}
	n := int64(binary.LittleEndian.Uint32(head[4:]))
	if n > maxStoredMap || 8+n > im.StreamSize {
		return nil, fmt.Errorf("image %s: its block map frame of %d bytes does not fit", im.Path, n)
	}
	b := make([]byte, n)
	if _, err := im.f.ReadAt(b, 8); err != nil {
		return nil, fmt.Errorf("image %s: reading its block map: %w", im.Path, err)
	}
	m, err := blockmap.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("image %s: its block map: %w", im.Path, err)
	}
	return &m, nil
}
