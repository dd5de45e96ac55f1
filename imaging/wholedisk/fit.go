package wholedisk

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Disk is a target disk the image was written to: read and written at
// any offset up to its size.
type Disk interface {
	io.ReaderAt
	io.WriterAt
}

// Fitted says what Fit changed.
type Fitted struct {
	Table string
	// Moved says GPT's backup table was written at the disk's end.
	Moved bool
	// Grown is the last partition after it grew; nil if it did not.
	Grown *Partition
	// Was is its length before.
	Was int64
}

// Fit fits the partition table of the whole disk just written to d, the
// image of imageSize bytes, to the disk's size bytes: GPT's backup table
// goes to the disk's end (and the primary header says so), and with
// growLast the partition that ends last grows to the end of the usable
// space. GUIDs, names, types and attributes are kept. A disk smaller than
// the layout's MinSize is refused, untouched.
func Fit(d Disk, imageSize, size int64, growLast bool) (Fitted, error) {
	size = size / sectorSize * sectorSize
	l, err := Read(d, imageSize)
	if err != nil {
		return Fitted{}, err
	}
	if size < l.MinSize {
		return Fitted{}, fmt.Errorf("a disk of %d bytes is too small for partitions that end at %d", size, l.End)
	}
	f := Fitted{Table: l.Table}
	if l.Table == "MBR" {
		return f, fitMBR(d, size, growLast, &f)
	}
	if size == imageSize && !growLast {
		return f, nil // the backup table is at the end already
	}
	t, err := readGPT(d, imageSize)
	if err != nil {
		return f, err
	}
	var hdr [sectorSize]byte
	if _, err := d.ReadAt(hdr[:], sectorSize); err != nil {
		return f, fmt.Errorf("reading the GPT header: %w", err)
	}
	oldBackup := int64(binary.LittleEndian.Uint64(hdr[32:])) * sectorSize
	t.Resize(uint64(size))
	if growLast {
		var last *Partition
		for _, p := range t.Partitions {
			if last == nil || int64(p.End+1)*sectorSize > last.Start+last.Len {
				last = &Partition{Index: p.Index, Start: int64(p.Start) * sectorSize, Len: int64(p.End-p.Start+1) * sectorSize}
			}
		}
		for _, p := range t.Partitions {
			if p.Index == last.Index && p.End < t.LastDataSector() {
				f.Was = last.Len
				p.End = t.LastDataSector()
				p.Size = (p.End - p.Start + 1) * sectorSize
				last.Len = int64(p.Size)
				f.Grown = last
			}
		}
	}
	// The old backup header, now inside the disk, would name a table
	// nobody keeps up: its signature goes.
	if oldBackup != size-sectorSize && oldBackup+sectorSize <= size {
		if _, err := d.WriteAt(make([]byte, sectorSize), oldBackup); err != nil {
			return f, fmt.Errorf("clearing the image's backup GPT header: %w", err)
		}
	}
	if err := t.Write(&diskFile{r: d, w: d, size: size}, size); err != nil {
		return f, fmt.Errorf("writing the GPT: %w", err)
	}
	f.Moved = size != imageSize
	return f, fixProtectiveMBR(d, size)
}

// fixProtectiveMBR caps the protective MBR's partition at the 32 bits it
// has, as UEFI asks, for a disk past 2 TiB.
func fixProtectiveMBR(d Disk, size int64) error {
	sectors := size/sectorSize - 1
	var entry [16]byte
	if _, err := d.ReadAt(entry[:], 446); err != nil {
		return fmt.Errorf("reading the protective MBR: %w", err)
	}
	if sectors <= 0xFFFFFFFF || entry[4] != 0xEE {
		return nil
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], 0xFFFFFFFF)
	if _, err := d.WriteAt(b[:], 446+12); err != nil {
		return fmt.Errorf("writing the protective MBR: %w", err)
	}
	return nil
}

// fitMBR grows the MBR's last primary partition to the disk's end, or as
// far as its 32-bit length reaches. An MBR has no backup to move.
func fitMBR(d Disk, size int64, growLast bool, f *Fitted) error {
	if !growLast {
		return nil
	}
	var mbr [sectorSize]byte
	if _, err := d.ReadAt(mbr[:], 0); err != nil {
		return fmt.Errorf("reading the MBR: %w", err)
	}
	parts, err := mbrPartitions(mbr[:], size)
	if err != nil {
		return err
	}
	last := parts[0]
	for _, p := range parts {
		if p.Start+p.Len > last.Start+last.Len {
			last = p
		}
	}
	e := mbr[446+16*(last.Index-1):][:16]
	if last.Extended {
		return nil // its logical partitions are not grown (Layout.LastExtended)
	}
	sectors := min((size-last.Start)/sectorSize, 0xFFFFFFFF)
	if sectors*sectorSize <= last.Len {
		return nil
	}
	binary.LittleEndian.PutUint32(e[12:], uint32(sectors))
	copy(e[5:8], []byte{0xFE, 0xFF, 0xFF}) // its end is past what CHS can say
	if _, err := d.WriteAt(e, int64(446+16*(last.Index-1))); err != nil {
		return fmt.Errorf("writing the MBR: %w", err)
	}
	f.Was, last.Len = last.Len, sectors*sectorSize
	f.Grown = &last
	return nil
}
