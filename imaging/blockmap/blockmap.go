// Package blockmap finds which bytes of a partition image its file system
// uses, so that a cast can leave the free space out: a used disk's free
// blocks hold old data, which would otherwise be sent, written and
// verified in full.
//
// A Map is what a file system's own allocation records say is in use: the
// blocks its bitmaps (ext2/3/4, NTFS) or its table (FAT12/16/32) mark, its
// metadata among them; of a swap area, its header; of a whole disk (MBR or
// GPT), its tables and gaps and each partition as its own file system
// maps. Where none is recognised there is no map, and the whole image
// counts as used.
package blockmap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Extent is a run of bytes in use, [Off, Off+Len).
type Extent struct {
	Off, Len int64
}

// End is the first byte past the extent.
func (e Extent) End() int64 { return e.Off + e.Len }

// Map is the bytes a file system uses of an image of Size bytes, as sorted,
// disjoint, non-adjacent extents.
type Map struct {
	FS        string // the file system, e.g. "ext4"
	BlockSize int64  // its allocation unit
	Size      int64  // the image's length
	Used      []Extent
}

// UsedBytes is how many bytes of the image are in use.
func (m Map) UsedBytes() int64 {
	var n int64
	for _, e := range m.Used {
		n += e.Len
	}
	return n
}

// NextUsed reports the run of used bytes at or after off: it starts at
// start (off itself if off is in use, Size if nothing after off is) and
// ends at end.
func (m Map) NextUsed(off int64) (start, end int64) {
	i, _ := slices.BinarySearchFunc(m.Used, off, func(e Extent, off int64) int {
		switch {
		case e.End() <= off:
			return -1
		case e.Off > off:
			return 1
		}
		return 0
	})
	if i == len(m.Used) {
		return m.Size, m.Size
	}
	e := m.Used[i]
	return max(e.Off, off), e.End()
}

// ErrUnknown is returned by Read for an image whose file system it does not
// know (or that holds none): the whole image is to be sent.
var ErrUnknown = errors.New("no file system it can map")

// ErrDirty is returned for a file system that was not cleanly unmounted:
// its bitmaps may not say what its journal or orphans hold.
var ErrDirty = errors.New("the file system was not cleanly unmounted")

// Read maps the file system of the size-byte image r. It returns
// ErrUnknown when it recognises none, and wraps ErrDirty when the file
// system must be checked first.
func Read(r io.ReaderAt, size int64) (Map, error) { return read(r, size, true) }

// read maps r; disks says whether a partition table may be followed (not
// within a partition).
func read(r io.ReaderAt, size int64, disks bool) (Map, error) {
	head := make([]byte, swapPage)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Map{}, fmt.Errorf("reading the image's first blocks: %w", err)
	}
	head = head[:n]
	ext, err := isExt(r)
	if err != nil {
		return Map{}, err
	}
	bpb, fat := parseFAT(head)
	found := map[string]bool{"ext": ext, "FAT": fat, "NTFS": isNTFS(head), "swap": isSwap(head)}
	var signs []string
	for _, name := range []string{"ext", "FAT", "NTFS", "swap"} {
		if found[name] {
			signs = append(signs, name)
		}
	}
	table := partitionTable(head, size)
	switch {
	case table != "" && len(signs) > 0:
		// A disk partitioned after it was formatted whole (or the other
		// way round) keeps both: which is live is not for the map to guess.
		return Map{}, fmt.Errorf("both a partition table (%s) and the signature of %s at its start: %w", table, signs[0], ErrUnknown)
	case table != "" && !disks:
		return Map{}, fmt.Errorf("a partition table within a partition: %w", ErrUnknown)
	case table != "":
		return readDisk(r, size, table == "GPT")
	case len(signs) > 1:
		return Map{}, fmt.Errorf("the signatures of %v at once: %w", signs, ErrUnknown)
	case ext:
		return readExt(r, size)
	case found["NTFS"]:
		return readNTFS(r, head, size)
	case fat:
		return readFAT(r, bpb, size)
	case found["swap"]:
		// Swap holds nothing worth keeping past its header: what it held
		// was the memory of a machine long off.
		var b builder
		b.add(0, swapPage)
		return Map{FS: "swap", BlockSize: swapPage, Size: size, Used: b.used}, nil
	}
	return Map{}, ErrUnknown
}

// swapPage is the page size of the swap areas mapped: their signature
// ends the first page.
const swapPage = 4096

func isSwap(head []byte) bool {
	return len(head) == swapPage && (string(head[swapPage-10:]) == "SWAPSPACE2" || string(head[swapPage-10:]) == "SWAP-SPACE")
}

// Union is the bytes either map keeps, of images of a's size.
func Union(a, b Map) Map {
	all := append(slices.Clone(a.Used), b.Used...)
	slices.SortFunc(all, func(x, y Extent) int { return cmp.Compare(x.Off, y.Off) })
	var bl builder
	for _, e := range all {
		bl.add(e.Off, e.Len)
	}
	u := a
	u.FS, u.BlockSize, u.Used = a.FS+" and "+b.FS, min(a.BlockSize, b.BlockSize), bl.used
	return u
}

// builder collects used extents in ascending order, merging neighbours.
type builder struct {
	used []Extent
}

func (b *builder) add(off, n int64) {
	if n <= 0 {
		return
	}
	if k := len(b.used); k > 0 && b.used[k-1].End() >= off {
		last := &b.used[k-1]
		last.Len = max(last.End(), off+n) - last.Off
		return
	}
	b.used = append(b.used, Extent{off, n})
}

// readAt reads len(p) bytes at off, an error naming what was read.
func readAt(r io.ReaderAt, p []byte, off int64, what string) error {
	if _, err := r.ReadAt(p, off); err != nil {
		return fmt.Errorf("reading the %s at byte %d: %w", what, off, err)
	}
	return nil
}

// DiskTable names the partition table a whole disk's image of size bytes
// starts with: "GPT", "MBR", or "" when it holds none, or holds one beside
// a file system's signature (a disk formatted whole and partitioned, or
// the other way round: which one is live is not guessed).
func DiskTable(r io.ReaderAt, size int64) (string, error) {
	head := make([]byte, swapPage)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the image's first blocks: %w", err)
	}
	head = head[:n]
	ext, err := isExt(r)
	if err != nil {
		return "", err
	}
	_, fat := parseFAT(head)
	if ext || fat || isNTFS(head) || isSwap(head) {
		return "", nil
	}
	return partitionTable(head, size), nil
}

// Of is the map of size bytes that marks the given extents, in any order
// and overlapping or not, clipped to size.
func Of(size int64, extents ...Extent) Map {
	all := slices.Clone(extents)
	slices.SortFunc(all, func(x, y Extent) int { return cmp.Compare(x.Off, y.Off) })
	var bl builder
	for _, e := range all {
		off := max(e.Off, 0)
		bl.add(off, min(e.End(), size)-off)
	}
	return Map{Size: size, Used: bl.used}
}
