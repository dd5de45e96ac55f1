package imaging

import "context"

// A raw image file is often sparse: a file system image made by mkfs, a
// copy made with cp --sparse or a VM disk keeps its free space as holes.
// Reading a hole costs as much as reading data (the kernel fills pages
// with zeros and copies them out), only to find zeros. The source asks the
// file system where the holes are instead, and sends them as zero runs
// unread.

// NextData reports where the image file stores bytes from off on: the
// next stored byte is at data (>= off, or the end of the file) and the
// stored run it begins ends at hole. ok is false when the file system
// cannot tell (a block device, or a file system without SEEK_DATA): the
// whole file must then be read. Only a raw image's file maps to its bytes.
// Through a block map (UseMap), free blocks count as holes too.
func (im *Image) NextData(off int64) (data, hole int64, ok bool) {
	if im.Encoding != Raw {
		return 0, 0, false
	}
	if im.used != nil {
		return im.nextUsedData(off)
	}
	return nextData(im.f, off, im.StreamSize)
}

// HoleRun says whether the hole of a file of size bytes from off up to
// data (the next stored byte) is sent as a zero run without reading it,
// and where that run ends: a zero run is whole ZeroBlocks (but at the end
// of the image) and at least MinZeroRun long. Shorter holes are read.
func HoleRun(off, data, size int64) (end int64, ok bool) {
	end = data
	if end < size {
		end -= end % ZeroBlock
	}
	return end, off%ZeroBlock == 0 && end-off >= MinZeroRun
}

// maxHoleWalk bounds the extents HoleBytes visits: a file fragmented
// beyond it is counted as read whole.
const maxHoleWalk = 1 << 20

// HoleBytes is how much of the image the source sends as zero runs
// without reading it (see HoleRun); ok is false when that is not known.
func (im *Image) HoleBytes(ctx context.Context) (holes int64, ok bool) {
	ok = im.HoleRuns(ctx, func(off, end int64) { holes += end - off })
	if !ok {
		return 0, false
	}
	return holes, true
}

// HoleRuns calls run, in order, for each stretch [off, end) of the image
// that the source sends as a zero run without reading it (see HoleRun).
// It returns false, having called run for some of them perhaps, when the
// file system cannot tell or the file is fragmented beyond maxHoleWalk.
func (im *Image) HoleRuns(ctx context.Context, run func(off, end int64)) bool {
	size := im.StreamSize
	for off, i := int64(0), 0; off < size; i++ {
		if i == maxHoleWalk || ctx.Err() != nil {
			return false
		}
		data, hole, ok := im.NextData(off)
		if !ok {
			return false
		}
		if end, skip := HoleRun(off, data, size); skip {
			run(off, end)
			off = end
			continue
		}
		// Read up to the next hole, from its first whole block on.
		next := min(size, (hole+ZeroBlock-1)/ZeroBlock*ZeroBlock)
		if next <= off {
			return false // the file system contradicts itself
		}
		off = next
	}
	return true
}
