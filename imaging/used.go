package imaging

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"dolly/imaging/blockmap"
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

// ReadMap maps the file system of a raw image (blockmap.Read), reading the
// file itself. blockmap.ErrUnknown says it holds none the map knows.
func (im *Image) ReadMap() (blockmap.Map, error) {
	if im.Encoding != Raw {
		return blockmap.Map{}, fmt.Errorf("image %s is %s: %w", im.Path, im.Encoding, blockmap.ErrUnknown)
	}
	m, err := blockmap.Read(im.f, im.Size)
	if err != nil {
		return m, fmt.Errorf("image %s: %w", im.Path, err)
	}
	return m, nil
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
