package blockmap

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/diskfs/go-diskfs/partition"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/diskfs/go-diskfs/partition/mbr"
	"github.com/diskfs/go-diskfs/partition/part"
)

// A whole disk's image (MBR or GPT) maps partition by partition: each
// partition whose file system is known maps as that file system does,
// offset to where it lies; the tables, the gaps between partitions, and
// partitions of unknown content are in use whole.

// sectorSize is the logical sector of the disk images mapped.
const sectorSize = 512

// partitionTable names the partition table at the start of an image of
// size bytes whose first sectors are head: "GPT" (its primary header), "MBR"
// (entries that all make sense: a boot flag of 0 or 0x80, partitions
// inside the image), or "" for none. A protective MBR whose GPT header is
// missing counts as none that can be read.
func partitionTable(head []byte, size int64) string {
	if len(head) >= 2*sectorSize && bytes.Equal(head[sectorSize:sectorSize+8], []byte("EFI PART")) {
		return "GPT"
	}
	if len(head) < sectorSize || head[510] != 0x55 || head[511] != 0xAA {
		return ""
	}
	le := binary.LittleEndian
	some := false
	for i := range 4 {
		e := head[446+16*i:][:16]
		if e[0] != 0 && e[0] != 0x80 {
			return ""
		}
		if e[4] == 0 {
			continue
		}
		start, n := int64(le.Uint32(e[8:])), int64(le.Uint32(e[12:]))
		if e[4] == 0xEE || start < 1 || n == 0 || (start+n)*sectorSize > size {
			return ""
		}
		some = true
	}
	if !some {
		return ""
	}
	return "MBR"
}

// readDisk maps the partitions of a whole disk's image.
func readDisk(r io.ReaderAt, size int64, isGPT bool) (Map, error) {
	f := &readerFile{SectionReader: io.NewSectionReader(r, 0, size)}
	var t partition.Table
	var err error
	if isGPT {
		t, err = gpt.Read(f, sectorSize, sectorSize)
	} else {
		// Not partition.Read: it would take a GPT's backup header at the
		// end of an MBR disk for a live table.
		t, err = mbr.Read(f, sectorSize, sectorSize)
	}
	if err != nil {
		return Map{}, fmt.Errorf("partition table: %v: %w", err, ErrUnknown)
	}
	var parts []part.Partition
	for _, p := range t.GetPartitions() {
		if p != nil && p.GetSize() > 0 {
			parts = append(parts, p)
		}
	}
	slices.SortFunc(parts, func(a, b part.Partition) int { return cmp.Compare(a.GetStart(), b.GetStart()) })
	var b builder
	var names []string
	off := int64(0)
	for _, p := range parts {
		start, n := p.GetStart(), p.GetSize()
		if start < max(off, sectorSize) || start+n > size {
			return Map{}, fmt.Errorf("%s partition %d (bytes %d-%d) overlaps another or lies past the image's %d bytes: %w",
				t.Type(), p.GetIndex(), start, start+n-1, size, ErrUnknown)
		}
		b.add(off, start-off)
		m, err := read(io.NewSectionReader(r, start, n), n, false)
		switch {
		case errors.Is(err, ErrUnknown):
			b.add(start, n)
			names = append(names, "?")
		case err != nil:
			return Map{}, fmt.Errorf("partition %d: %w", p.GetIndex(), err)
		default:
			for _, e := range m.Used {
				b.add(start+e.Off, e.Len)
			}
			names = append(names, m.FS)
		}
		off = start + n
	}
	if len(parts) == 0 {
		return Map{}, fmt.Errorf("%s table with no partition: %w", t.Type(), ErrUnknown)
	}
	b.add(off, size-off)
	return Map{FS: fmt.Sprintf("%s disk (%s)", strings.ToUpper(t.Type()), strings.Join(names, ", ")), BlockSize: sectorSize, Size: size, Used: b.used}, nil
}

// readerFile is an image's bytes as the partition library reads a disk.
type readerFile struct {
	*io.SectionReader
}

func (f *readerFile) Close() error               { return nil }
func (f *readerFile) Stat() (fs.FileInfo, error) { return readerInfo{f.Size()}, nil }

type readerInfo struct{ size int64 }

func (i readerInfo) Name() string       { return "image" }
func (i readerInfo) Size() int64        { return i.size }
func (i readerInfo) Mode() fs.FileMode  { return 0o444 }
func (i readerInfo) ModTime() time.Time { return time.Time{} }
func (i readerInfo) IsDir() bool        { return false }
func (i readerInfo) Sys() any           { return nil }
