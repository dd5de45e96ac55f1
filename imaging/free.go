package imaging

import "dolly/imaging/blockmap"

// A Discarder can give up a range of a target that need not read back as
// anything in particular (see Target.Discard).
type Discarder interface {
	Discard(off, n int64) error
}

// FreeSkipper writes an image whose file system's free blocks need not be
// kept: the source sends them as zeros (Image.UseMap), and rather than
// zero them on the target, FreeSkipper discards them where the target
// can, or leaves them as they are. Zeros in blocks the map says are in use
// are zeroed as ever. The digest is the stream's and is not affected.
type FreeSkipper struct {
	w    BlockWriter
	used blockmap.Map
}

// SkipFree wraps w to skip the bytes used does not mark in use.
func SkipFree(w BlockWriter, used blockmap.Map) *FreeSkipper {
	return &FreeSkipper{w: w, used: used}
}

// WriteAt writes p at off.
func (s *FreeSkipper) WriteAt(p []byte, off int64) (int, error) { return s.w.WriteAt(p, off) }

// ZeroRange zeroes what of [off, off+n) is in use and skips the rest.
func (s *FreeSkipper) ZeroRange(off, n int64) error {
	end := off + n
	if end > s.used.Size { // past the map: not known to be free
		if err := s.w.ZeroRange(max(off, s.used.Size), end-max(off, s.used.Size)); err != nil {
			return err
		}
		end = max(off, s.used.Size)
	}
	for off < end {
		start, usedEnd := s.used.NextUsed(off)
		if start > off {
			k := min(start, end) - off
			if d, ok := s.w.(Discarder); ok {
				if err := d.Discard(off, k); err != nil {
					return err
				}
			}
			off += k
			continue
		}
		k := min(usedEnd, end) - off
		if err := s.w.ZeroRange(off, k); err != nil {
			return err
		}
		off += k
	}
	return nil
}
