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
//
// The first and last SignatureEdge bytes of the image, and of each of a
// whole disk's partitions, are zeroed all the same where free: that is
// where RAID, LVM, ZFS, btrfs and swap keep the signatures that make a
// system take a disk for theirs, and what the disk held before must not
// come back to life beside the new file system.
type FreeSkipper struct {
	w     BlockWriter
	used  blockmap.Map
	zones blockmap.Map // zeroed where free
}

// SignatureEdge is how much of each end of an image or partition is
// zeroed where free.
const SignatureEdge = 1 << 20

// SkipFree wraps w to skip the bytes used does not mark in use. parts are
// the partitions of a whole disk's image, if it is one.
func SkipFree(w BlockWriter, used blockmap.Map, parts ...blockmap.Extent) *FreeSkipper {
	zones := []blockmap.Extent{{Off: 0, Len: SignatureEdge}, {Off: used.Size - SignatureEdge, Len: SignatureEdge}}
	for _, p := range parts {
		zones = append(zones, blockmap.Extent{Off: p.Off, Len: min(p.Len, SignatureEdge)},
			blockmap.Extent{Off: p.End() - min(p.Len, SignatureEdge), Len: min(p.Len, SignatureEdge)})
	}
	return &FreeSkipper{w: w, used: used, zones: blockmap.Of(used.Size, zones...)}
}

// WriteAt writes p at off.
func (s *FreeSkipper) WriteAt(p []byte, off int64) (int, error) { return s.w.WriteAt(p, off) }

// LendBuffer lends the target's buffer (BufferLender).
func (s *FreeSkipper) LendBuffer() []byte { return LendFrom(s.w) }

// ReturnBuffer returns it.
func (s *FreeSkipper) ReturnBuffer(b []byte) { ReturnTo(s.w, b) }

// skip gives up the free range [off, off+n), but zeroes what of it lies
// in a signature zone.
func (s *FreeSkipper) skip(off, n int64) error {
	end := off + n
	for off < end {
		var k int64
		var err error
		if start, zoneEnd := s.zones.NextUsed(off); start > off {
			k = min(start, end) - off
			if d, ok := s.w.(Discarder); ok {
				err = d.Discard(off, k)
			}
		} else {
			k = min(zoneEnd, end) - off
			err = s.w.ZeroRange(off, k)
		}
		if err != nil {
			return err
		}
		off += k
	}
	return nil
}

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
			if err := s.skip(off, k); err != nil {
				return err
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
