package blockmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// A FAT file system (FAT12, FAT16, FAT32: an EFI system partition, a USB
// stick, a vfat data partition) keeps its allocation in the table itself:
// a cluster whose entry is zero is free. Everything before the first
// cluster (boot sectors, the tables, FAT12/16's root directory) is in use.
// The layout is Microsoft's FAT specification (fatgen103).

// fatBPB is what the map needs of a FAT boot sector.
type fatBPB struct {
	bytesPerSec, secPerClus uint32
	reserved, fats          uint32
	rootEntries             uint32
	totalSec, fatSec        uint32
	kind                    string // FAT12, FAT16 or FAT32
	clusters                uint32
	firstData               uint32 // sector
	active                  uint32 // the table kept, with FAT32's mirroring off
	dirty                   bool
}

// parseFAT reads a FAT boot sector; ok is false if bs is not one.
func parseFAT(bs []byte) (fatBPB, bool) {
	le := binary.LittleEndian
	if len(bs) < 512 || bs[510] != 0x55 || bs[511] != 0xAA || (bs[0] != 0xEB && bs[0] != 0xE9) {
		return fatBPB{}, false
	}
	if oem := bs[3:11]; bytes.Equal(oem, []byte("NTFS    ")) || bytes.Equal(oem, []byte("EXFAT   ")) {
		return fatBPB{}, false
	}
	b := fatBPB{
		bytesPerSec: uint32(le.Uint16(bs[0x0B:])),
		secPerClus:  uint32(bs[0x0D]),
		reserved:    uint32(le.Uint16(bs[0x0E:])),
		fats:        uint32(bs[0x10]),
		rootEntries: uint32(le.Uint16(bs[0x11:])),
		totalSec:    uint32(le.Uint16(bs[0x13:])),
		fatSec:      uint32(le.Uint16(bs[0x16:])),
	}
	switch b.bytesPerSec {
	case 512, 1024, 2048, 4096:
	default:
		return fatBPB{}, false
	}
	if b.secPerClus == 0 || b.secPerClus&(b.secPerClus-1) != 0 || b.reserved == 0 || b.fats == 0 || b.fats > 4 {
		return fatBPB{}, false
	}
	if b.totalSec == 0 {
		b.totalSec = le.Uint32(bs[0x20:])
	}
	stateOff := 0x25
	fat32 := b.fatSec == 0
	if fat32 {
		b.fatSec = le.Uint32(bs[0x24:])
		stateOff = 0x41
		// With mirroring off (bit 7) only the active table is kept.
		if flags := le.Uint16(bs[0x28:]); flags&0x80 != 0 {
			b.active = uint32(flags & 0x0F)
		}
	}
	rootSec := (b.rootEntries*32 + b.bytesPerSec - 1) / b.bytesPerSec
	b.firstData = b.reserved + b.fats*b.fatSec + rootSec
	if b.fatSec == 0 || b.totalSec <= b.firstData {
		return fatBPB{}, false
	}
	b.clusters = (b.totalSec - b.firstData) / b.secPerClus
	// As Linux tells them: FAT32 by its boot sector, FAT12 from FAT16 by
	// the count of clusters.
	switch {
	case fat32:
		b.kind = "FAT32"
	case b.clusters < 4085:
		b.kind = "FAT12"
	default:
		b.kind = "FAT16"
	}
	if b.active >= b.fats {
		return fatBPB{}, false
	}
	// The driver that mounts a volume marks it dirty in the boot sector
	// until it unmounts cleanly (Linux, Windows).
	b.dirty = bs[stateOff]&0x01 != 0
	return b, true
}

// fatEntry reads entry n of the table.
func (b fatBPB) entry(table []byte, n uint32) uint32 {
	le := binary.LittleEndian
	switch b.kind {
	case "FAT12":
		v := uint32(le.Uint16(table[n+n/2:]))
		if n%2 == 1 {
			return v >> 4
		}
		return v & 0xFFF
	case "FAT16":
		return uint32(le.Uint16(table[2*n:]))
	}
	return le.Uint32(table[4*n:]) & 0x0FFFFFFF
}

// cleanShutdown reads the clean-shutdown bit FAT16 and FAT32 keep in the
// table's second entry (FAT12 has none).
func (b fatBPB) cleanShutdown(table []byte) bool {
	switch b.kind {
	case "FAT16":
		return b.entry(table, 1)&0x8000 != 0
	case "FAT32":
		return b.entry(table, 1)&0x08000000 != 0
	}
	return true
}

// readFAT maps a FAT file system from its first table.
func readFAT(r io.ReaderAt, b fatBPB, size int64) (Map, error) {
	sec := int64(b.bytesPerSec)
	fsBytes := int64(b.totalSec) * sec
	if fsBytes > size {
		return Map{}, fmt.Errorf("%s of %d bytes in an image of %d: the image is cut short", b.kind, fsBytes, size)
	}
	entries := int64(b.clusters) + 2
	tableBytes := map[string]int64{"FAT12": (entries*3 + 1) / 2, "FAT16": 2 * entries, "FAT32": 4 * entries}[b.kind]
	if tableBytes > int64(b.fatSec)*sec {
		return Map{}, fmt.Errorf("%s: a table of %d sectors for %d clusters: is it corrupt? (fsck.fat)", b.kind, b.fatSec, b.clusters)
	}
	table := make([]byte, tableBytes+1) // +1: FAT12's last entry reads a byte past
	if err := readAt(r, table[:tableBytes], int64(b.reserved+b.active*b.fatSec)*sec, b.kind+" table"); err != nil {
		return Map{}, err
	}
	if b.dirty || !b.cleanShutdown(table) {
		return Map{}, fmt.Errorf("%s: %w: run fsck.fat first", b.kind, ErrDirty)
	}
	clusterBytes := int64(b.secPerClus) * sec
	var bl builder
	bl.add(0, int64(b.firstData)*sec)
	for c := uint32(2); c < b.clusters+2; c++ {
		if b.entry(table, c) != 0 {
			bl.add(int64(b.firstData)*sec+int64(c-2)*clusterBytes, clusterBytes)
		}
	}
	// Sectors past the last whole cluster, and anything past the file
	// system, are not the table's to free.
	if end := int64(b.firstData)*sec + int64(b.clusters)*clusterBytes; end < size {
		bl.add(end, size-end)
	}
	return Map{FS: b.kind, BlockSize: clusterBytes, Size: size, Used: bl.used}, nil
}
