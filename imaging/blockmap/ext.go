package blockmap

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
)

// An ext2, ext3 or ext4 file system keeps a bitmap of its blocks per block
// group; a bit set is a block in use, its metadata included (superblock
// copies, group descriptors, bitmaps, inode tables, the journal). A group
// whose bitmap was never written (BLOCK_UNINIT, left so by mke2fs's lazy
// init) holds no data, only the metadata placed in it, which the
// descriptors and the superblock's layout say where.
//
// No maintained Go library exposes these bitmaps (go-diskfs reads them
// only inside its ext4 writer), so they are read here, from the layout the
// kernel documents (Documentation/filesystems/ext4).

const (
	extSuperOff = 1024
	extMagic    = 0xEF53

	extStateClean  = 0x1
	extStateErrors = 0x2

	extCompatSparseSuper2 = 0x200

	extIncompatRecover = 0x4
	extIncompatMetaBG  = 0x10
	extIncompat64Bit   = 0x80
	// extIncompatKnown are the features whose file systems keep their
	// block bitmaps as the map reads them: filetype, recover (refused
	// apart), meta_bg (refused apart), extents, 64bit, mmp, flex_bg,
	// ea_inode, dirdata, csum_seed, largedir, inline_data, encrypt,
	// casefold. Any other (a journal device, compression) is not mapped.
	extIncompatKnown = 0x2 | 0x4 | 0x10 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x1000 | 0x2000 | 0x4000 | 0x8000 | 0x10000 | 0x20000

	extROCompatSparseSuper = 0x1
	extROCompatGDTCsum     = 0x10
	extROCompatBigalloc    = 0x200
	extROCompatMetaCsum    = 0x400

	extBlockUninit = 0x2
)

// isExt says whether r holds an ext2/3/4 superblock.
func isExt(r io.ReaderAt) (bool, error) {
	var magic [2]byte
	if _, err := r.ReadAt(magic[:], extSuperOff+0x38); err != nil {
		if err == io.EOF {
			return false, nil
		}
		return false, fmt.Errorf("reading the image's first blocks: %w", err)
	}
	return binary.LittleEndian.Uint16(magic[:]) == extMagic, nil
}

// extSuper is what the map needs of an ext superblock.
type extSuper struct {
	blocks, firstData        uint64
	blockSize                int64
	perGroup, inodesPerGroup uint32
	inodeSize                uint32
	descSize                 int64
	reservedGDT              uint32
	compat, incompat, ro     uint32
	state                    uint16
	name                     string
}

func parseExtSuper(sb []byte) (extSuper, error) {
	le := binary.LittleEndian
	s := extSuper{
		blocks:         uint64(le.Uint32(sb[0x4:])),
		firstData:      uint64(le.Uint32(sb[0x14:])),
		perGroup:       le.Uint32(sb[0x20:]),
		inodesPerGroup: le.Uint32(sb[0x28:]),
		state:          le.Uint16(sb[0x3A:]),
		inodeSize:      128,
		descSize:       32,
	}
	logBlock := le.Uint32(sb[0x18:])
	if logBlock > 6 {
		return s, fmt.Errorf("ext superblock: block size 1024<<%d is not one ext allows", logBlock)
	}
	s.blockSize = 1024 << logBlock
	if le.Uint32(sb[0x4C:]) >= 1 { // dynamic revision: the feature fields exist
		s.inodeSize = uint32(le.Uint16(sb[0x58:]))
		s.compat, s.incompat, s.ro = le.Uint32(sb[0x5C:]), le.Uint32(sb[0x60:]), le.Uint32(sb[0x64:])
		s.reservedGDT = uint32(le.Uint16(sb[0xCE:]))
	}
	if s.incompat&extIncompat64Bit != 0 {
		s.blocks |= uint64(le.Uint32(sb[0x150:])) << 32
		s.descSize = int64(le.Uint16(sb[0xFE:]))
		if s.descSize < 32 || s.descSize > 1024 || s.descSize&(s.descSize-1) != 0 {
			return s, fmt.Errorf("ext superblock: group descriptors of %d bytes", s.descSize)
		}
	}
	switch {
	case s.incompat&(0x40|0x200|0x80) != 0 || s.ro&(extROCompatMetaCsum|0x8|0x20) != 0:
		s.name = "ext4"
	case s.compat&0x4 != 0: // has a journal
		s.name = "ext3"
	default:
		s.name = "ext2"
	}
	if s.perGroup == 0 || s.perGroup > uint32(8*s.blockSize) || s.blocks <= s.firstData {
		return s, fmt.Errorf("%s superblock: %d blocks in groups of %d: not a file system's", s.name, s.blocks, s.perGroup)
	}
	return s, nil
}

// hasSuperBackup says whether group g holds a copy of the superblock and
// the group descriptors.
func (s extSuper) hasSuperBackup(g uint64) bool {
	if g <= 1 || s.ro&extROCompatSparseSuper == 0 {
		return true
	}
	for _, base := range []uint64{3, 5, 7} {
		n := base
		for n < g {
			n *= base
		}
		if n == g {
			return true
		}
	}
	return false
}

// readExt maps an ext2/3/4 file system from its block bitmaps.
func readExt(r io.ReaderAt, size int64) (Map, error) {
	sb := make([]byte, 1024)
	if err := readAt(r, sb, extSuperOff, "ext superblock"); err != nil {
		return Map{}, err
	}
	s, err := parseExtSuper(sb)
	if err != nil {
		return Map{}, err
	}
	if s.blocks > uint64(size/s.blockSize) {
		return Map{}, fmt.Errorf("%s of %d blocks of %d bytes in an image of %d: the image is cut short", s.name, s.blocks, s.blockSize, size)
	}
	fsBytes := int64(s.blocks) * s.blockSize
	if s.state&extStateClean == 0 || s.incompat&extIncompatRecover != 0 {
		return Map{}, fmt.Errorf("%s: %w (its journal is to be replayed, or it is still mounted): run e2fsck first", s.name, ErrDirty)
	}
	if s.state&extStateErrors != 0 {
		return Map{}, fmt.Errorf("%s: %w: the kernel found errors in it, so its bitmaps are in doubt: run e2fsck -f first", s.name, ErrDirty)
	}
	if unknown := s.incompat &^ extIncompatKnown; unknown != 0 {
		return Map{}, fmt.Errorf("%s with incompatible features %#x: %w", s.name, unknown, ErrUnknown)
	}
	// Layouts this reader does not place the metadata of: the whole image
	// is sent rather than a guess.
	switch {
	case s.incompat&extIncompatMetaBG != 0:
		return Map{}, fmt.Errorf("%s with meta_bg: %w", s.name, ErrUnknown)
	case s.compat&extCompatSparseSuper2 != 0:
		return Map{}, fmt.Errorf("%s with sparse_super2: %w", s.name, ErrUnknown)
	case s.ro&extROCompatBigalloc != 0:
		return Map{}, fmt.Errorf("%s with bigalloc: %w", s.name, ErrUnknown)
	}
	groups := (s.blocks - s.firstData + uint64(s.perGroup) - 1) / uint64(s.perGroup)
	descs := make([]byte, int64(groups)*s.descSize)
	gdtStart := int64(s.firstData+1) * s.blockSize
	if err := readAt(r, descs, gdtStart, s.name+" group descriptors"); err != nil {
		return Map{}, err
	}
	// Every group's bitmaps and inode table, wherever they lie (flex_bg
	// packs them into a few groups).
	type meta struct{ start, blocks uint64 }
	itable := (uint64(s.inodesPerGroup)*uint64(s.inodeSize) + uint64(s.blockSize) - 1) / uint64(s.blockSize)
	var metas []meta
	desc := func(g uint64) []byte { return descs[int64(g)*s.descSize:][:s.descSize] }
	at := func(d []byte, lo, hi int) uint64 {
		v := uint64(binary.LittleEndian.Uint32(d[lo:]))
		if s.descSize >= 64 {
			v |= uint64(binary.LittleEndian.Uint32(d[hi:])) << 32
		}
		return v
	}
	for g := range groups {
		d := desc(g)
		metas = append(metas, meta{at(d, 0x0, 0x20), 1}, meta{at(d, 0x4, 0x24), 1}, meta{at(d, 0x8, 0x28), itable})
	}
	slices.SortFunc(metas, func(a, b meta) int { return cmp.Compare(a.start, b.start) })
	gdtBlocks := (uint64(groups)*uint64(s.descSize) + uint64(s.blockSize) - 1) / uint64(s.blockSize)
	uninitValid := s.ro&(extROCompatGDTCsum|extROCompatMetaCsum) != 0

	var b builder
	// Block 0 and what precedes the first data block (the boot sector, and
	// with 1 KiB blocks the superblock's own) are the file system's.
	b.add(0, int64(s.firstData)*s.blockSize)
	bitmap := make([]byte, s.blockSize)
	for g := range groups {
		first := s.firstData + g*uint64(s.perGroup)
		n := min(uint64(s.perGroup), s.blocks-first)
		d := desc(g)
		if uninitValid && binary.LittleEndian.Uint16(d[0x12:])&extBlockUninit != 0 {
			// No bitmap: the group's own superblock copy and descriptors,
			// and whatever metadata was placed in it.
			if s.hasSuperBackup(g) {
				b.add(int64(first)*s.blockSize, int64(1+gdtBlocks+uint64(s.reservedGDT))*s.blockSize)
			}
			// Metadata that starts up to an inode table's length before
			// the group may reach into it.
			from, _ := slices.BinarySearchFunc(metas, first-min(first, itable), func(m meta, b uint64) int { return cmp.Compare(m.start, b) })
			for _, m := range metas[from:] {
				if m.start >= first+n {
					break
				}
				lo, hi := max(m.start, first), min(m.start+m.blocks, first+n)
				if lo < hi {
					b.add(int64(lo)*s.blockSize, int64(hi-lo)*s.blockSize)
				}
			}
			continue
		}
		bm := at(d, 0x0, 0x20)
		if bm == 0 || bm >= s.blocks {
			return Map{}, fmt.Errorf("%s: group %d's block bitmap at block %d, outside the file system: is it corrupt? (e2fsck -f)", s.name, g, bm)
		}
		if err := readAt(r, bitmap, int64(bm)*s.blockSize, fmt.Sprintf("%s block bitmap of group %d", s.name, g)); err != nil {
			return Map{}, err
		}
		addBits(&b, bitmap, n, int64(first), s.blockSize)
	}
	m := Map{FS: s.name, BlockSize: s.blockSize, Size: size, Used: b.used}
	// Whatever of the image lies past the file system is not its to free.
	if fsBytes < size {
		b.add(fsBytes, size-fsBytes)
		m.Used = b.used
	}
	return m, nil
}

// addBits adds the runs of set bits among the first n of bitmap (bit i of
// byte i/8, lowest first, is block first+i) to b.
func addBits(b *builder, bitmap []byte, n uint64, first, blockSize int64) {
	var runStart int64 = -1
	for i := uint64(0); i < n; {
		// Whole bytes of one kind go at once: most bitmaps are long runs.
		if i%8 == 0 && i+8 <= n {
			switch by := bitmap[i/8]; {
			case by == 0xFF:
				if runStart < 0 {
					runStart = int64(i)
				}
				i += 8
				continue
			case by == 0:
				if runStart >= 0 {
					b.add((first+runStart)*blockSize, (int64(i)-runStart)*blockSize)
					runStart = -1
				}
				i += 8
				continue
			case runStart < 0:
				// Skip to the first set bit of the byte.
				i += uint64(bits.TrailingZeros8(by))
			}
		}
		set := bitmap[i/8]&(1<<(i%8)) != 0
		switch {
		case set && runStart < 0:
			runStart = int64(i)
		case !set && runStart >= 0:
			b.add((first+runStart)*blockSize, (int64(i)-runStart)*blockSize)
			runStart = -1
		}
		i++
	}
	if runStart >= 0 {
		b.add((first+runStart)*blockSize, (int64(n)-runStart)*blockSize)
	}
}
