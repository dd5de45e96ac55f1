// Package wholedisk fits the image of a whole disk (an MBR or GPT
// partition table and its partitions) to a target disk of another size:
// GPT's backup table moves to the target's end, the last partition may
// grow to fill the disk (and its file system with it, where a tool here
// can), and a smaller disk takes the image when every partition fits.
package wholedisk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/diskfs/go-diskfs/partition/gpt"

	"dolly/imaging/blockmap"
)

// sectorSize is the logical sector the tables are read and written in.
const sectorSize = 512

// ErrNotDisk means an image holds no partition table this package fits.
var ErrNotDisk = errors.New("not the image of a whole disk")

// Layout is what a whole disk's image asks of a target.
type Layout struct {
	Table string // "GPT" or "MBR"
	// End is the byte after the last partition.
	End int64
	// MinSize is the smallest target that holds every partition (and,
	// for GPT, the backup table after them).
	MinSize int64
	// LastExtended says the partition that ends last is an MBR extended
	// one: its logical partitions are not grown.
	LastExtended bool
	// Parts are the partitions (an MBR's primary ones, extended ones whole).
	Parts []Partition
}

// Partition is one partition of a disk, in bytes.
type Partition struct {
	Index      int
	Start, Len int64
	Extended   bool // an MBR extended partition, holding logical ones
}

// Read reads the layout of the whole disk imaged in the size bytes of r.
// It wraps ErrNotDisk when r starts with no partition table it knows.
func Read(r io.ReaderAt, size int64) (Layout, error) {
	head := make([]byte, 2*sectorSize)
	if n, err := r.ReadAt(head, 0); n < len(head) {
		return Layout{}, fmt.Errorf("reading the partition table: %v: %w", err, ErrNotDisk)
	}
	// The same test as the block map's: a partition table, and no file
	// system's signature beside it.
	table, err := blockmap.DiskTable(r, size)
	if err != nil {
		return Layout{}, err
	}
	switch {
	case table == "":
		return Layout{}, ErrNotDisk
	case table == "GPT" && bytes.Equal(head[sectorSize:sectorSize+8], []byte("EFI PART")):
		t, err := readGPT(r, size)
		if err != nil {
			return Layout{}, err
		}
		end := lastPartition(t)
		l := Layout{Table: "GPT", End: end.Start + end.Len, MinSize: end.Start + end.Len + t.tableBytes() + sectorSize}
		for _, p := range t.Partitions {
			l.Parts = append(l.Parts, Partition{Index: p.Index, Start: int64(p.Start) * sectorSize, Len: int64(p.End-p.Start+1) * sectorSize})
		}
		return l, nil
	case head[510] == 0x55 && head[511] == 0xAA:
		parts, err := mbrPartitions(head[:sectorSize], size)
		if err != nil {
			return Layout{}, err
		}
		l := Layout{Table: "MBR", Parts: parts}
		for _, p := range parts {
			if p.Start+p.Len > l.End {
				l.End, l.LastExtended = p.Start+p.Len, p.Extended
			}
		}
		l.MinSize = l.End
		return l, nil
	}
	return Layout{}, ErrNotDisk
}

// gptTable is a GPT read with the fields the library keeps to itself.
type gptTable struct {
	*gpt.Table
	entries, entrySize int64
}

// tableBytes is the size of the partition entry array.
func (t gptTable) tableBytes() int64 {
	return (t.entries*t.entrySize + sectorSize - 1) / sectorSize * sectorSize
}

// readGPT reads the primary GPT of a disk of size bytes.
func readGPT(r io.ReaderAt, size int64) (gptTable, error) {
	hdr := make([]byte, 92)
	if _, err := r.ReadAt(hdr, sectorSize); err != nil {
		return gptTable{}, fmt.Errorf("reading the GPT header: %w", err)
	}
	t := gptTable{entries: int64(binary.LittleEndian.Uint32(hdr[80:])), entrySize: int64(binary.LittleEndian.Uint32(hdr[84:]))}
	// What the partition library writes back: 128-byte entries in whole
	// sectors, from LBA 2.
	if t.entrySize != gpt.PartitionEntrySize || t.entries == 0 || t.entries > 4096 || t.entries*t.entrySize%sectorSize != 0 ||
		binary.LittleEndian.Uint64(hdr[72:]) != 2 || binary.LittleEndian.Uint32(hdr[12:]) != 92 {
		return t, fmt.Errorf("a GPT laid out unusually (%d entries of %d bytes from LBA %d): it is not fitted to other disks",
			t.entries, t.entrySize, binary.LittleEndian.Uint64(hdr[72:]))
	}
	// The library writes a protective MBR back: a hybrid one (partitions
	// beside the 0xEE one) would lose its entries.
	var mbr [64]byte
	if _, err := r.ReadAt(mbr[:], 446); err != nil {
		return t, fmt.Errorf("reading the protective MBR: %w", err)
	}
	if mbr[4] != 0xEE || !bytes.Equal(mbr[16:], make([]byte, 48)) {
		return t, errors.New("a GPT disk with a hybrid MBR: it is not fitted to other disks")
	}
	var err error
	t.Table, err = gpt.Read(&diskFile{r: r, size: size}, sectorSize, sectorSize)
	if err != nil {
		return t, fmt.Errorf("reading the GPT: %w", err)
	}
	if t.RecoveredFromBackup {
		return t, errors.New("the primary GPT is damaged (its backup was read): repair the golden disk's table (sgdisk -v) first")
	}
	if len(t.Partitions) == 0 {
		return t, fmt.Errorf("a GPT with no partitions: %w", ErrNotDisk)
	}
	return t, nil
}

// lastPartition is the partition that ends last.
func lastPartition(t gptTable) Partition {
	var last Partition
	for _, p := range t.Partitions {
		if end := int64(p.End+1) * sectorSize; end > last.Start+last.Len {
			last = Partition{Index: p.Index, Start: int64(p.Start) * sectorSize, Len: end - int64(p.Start)*sectorSize}
		}
	}
	return last
}

// mbrPartitions are the primary partitions of an MBR, extended ones
// included (their logical partitions lie within them).
func mbrPartitions(mbr []byte, size int64) ([]Partition, error) {
	var parts []Partition
	for i := range 4 {
		e := mbr[446+16*i:][:16]
		if e[4] == 0 {
			continue
		}
		if e[4] == 0xEE {
			return nil, fmt.Errorf("a protective MBR without its GPT header: %w", ErrNotDisk)
		}
		start, n := int64(binary.LittleEndian.Uint32(e[8:]))*sectorSize, int64(binary.LittleEndian.Uint32(e[12:]))*sectorSize
		if start < sectorSize || n == 0 || start+n > size {
			return nil, fmt.Errorf("MBR partition %d (%d+%d) is not inside the disk: %w", i+1, start, n, ErrNotDisk)
		}
		parts = append(parts, Partition{Index: i + 1, Start: start, Len: n, Extended: e[4] == 0x05 || e[4] == 0x0F || e[4] == 0x85})
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("an MBR with no partitions: %w", ErrNotDisk)
	}
	return parts, nil
}

// diskFile is a disk as the partition library reads and writes one.
type diskFile struct {
	r    io.ReaderAt
	w    io.WriterAt // nil: read only
	size int64
	off  int64
}

func (f *diskFile) ReadAt(p []byte, off int64) (int, error) { return f.r.ReadAt(p, off) }
func (f *diskFile) WriteAt(p []byte, off int64) (int, error) {
	if f.w == nil {
		return 0, fs.ErrPermission
	}
	if off < 0 || off+int64(len(p)) > f.size {
		return 0, fmt.Errorf("write of %d bytes at %d is past the disk's %d", len(p), off, f.size)
	}
	return f.w.WriteAt(p, off)
}
func (f *diskFile) Read(p []byte) (int, error) {
	n, err := f.r.ReadAt(p, f.off)
	f.off += int64(n)
	return n, err
}
func (f *diskFile) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += f.off
	case io.SeekEnd:
		off += f.size
	}
	if off < 0 {
		return 0, fs.ErrInvalid
	}
	f.off = off
	return off, nil
}
func (f *diskFile) Close() error { return nil }
func (f *diskFile) Sync() error {
	if s, ok := f.w.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}
func (f *diskFile) Stat() (fs.FileInfo, error) { return diskInfo{f.size}, nil }

type diskInfo struct{ size int64 }

func (i diskInfo) Name() string       { return "disk" }
func (i diskInfo) Size() int64        { return i.size }
func (i diskInfo) Mode() fs.FileMode  { return 0o644 }
func (i diskInfo) ModTime() time.Time { return time.Time{} }
func (i diskInfo) IsDir() bool        { return false }
func (i diskInfo) Sys() any           { return nil }
