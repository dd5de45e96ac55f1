package blockmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	ntfs "www.velocidex.com/golang/go-ntfs/parser"
)

// NTFS keeps its cluster allocation in the $Bitmap file (MFT record 6), a
// bit a cluster; its metadata ($MFT, $LogFile, ...) are files like others,
// so their clusters are set too. The backup boot sector, in the volume's
// last sector, lies past the last cluster. go-ntfs (Velocidex) reads the
// MFT and the file's runs.

const (
	ntfsBitmapRecord = 6
	ntfsVolumeRecord = 3
	ntfsVolumeInfo   = 0x70   // $VOLUME_INFORMATION
	ntfsVolumeDirty  = 0x0001 // its flags: chkdsk is due
)

func isNTFS(head []byte) bool {
	return len(head) >= 512 && bytes.Equal(head[3:11], []byte("NTFS    ")) && head[510] == 0x55 && head[511] == 0xAA
}

// readNTFS maps an NTFS volume from its $Bitmap. The reader is a library
// that parses whatever the image holds: a panic in it is the image's
// error, not the server's.
func readNTFS(r io.ReaderAt, head []byte, size int64) (m Map, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = Map{}, fmt.Errorf("NTFS: the reader failed on it (%v): is it corrupt? (chkdsk)", p)
		}
	}()
	le := binary.LittleEndian
	sector := int64(le.Uint16(head[0x0B:]))
	perCluster := int64(head[0x0D])
	if perCluster > 0x80 { // a negative exponent: 2^-n sectors
		perCluster = 1 << (256 - perCluster)
	}
	total := int64(le.Uint64(head[0x28:]))
	if sector < 256 || sector > 4096 || perCluster == 0 || total <= 0 {
		return Map{}, fmt.Errorf("NTFS boot sector: %d-byte sectors, %d a cluster, %d in all: is it corrupt? (ntfsfix -n)", sector, perCluster, total)
	}
	clusterBytes := sector * perCluster
	clusters := total / perCluster
	if total*sector > size {
		return Map{}, fmt.Errorf("NTFS of %d bytes in an image of %d: the image is cut short", total*sector, size)
	}
	ctx, err := ntfs.GetNTFSContext(r, 0)
	if err != nil {
		return Map{}, fmt.Errorf("NTFS: %v (clusters over 64 KiB are not read): %w", err, ErrUnknown)
	}
	defer ctx.Close()
	if why, err := ntfsUnclean(ctx); err != nil {
		return Map{}, err
	} else if why != "" {
		return Map{}, fmt.Errorf("NTFS: %w: %s", ErrDirty, why)
	}
	entry, err := ctx.GetMFT(ntfsBitmapRecord)
	if err != nil {
		return Map{}, fmt.Errorf("NTFS $Bitmap: %v", err)
	}
	stream, err := ntfs.OpenStream(ctx, entry, ntfs.ATTR_TYPE_DATA, ntfs.WILDCARD_STREAM_ID, ntfs.WILDCARD_STREAM_NAME)
	if err != nil {
		return Map{}, fmt.Errorf("NTFS $Bitmap: %v", err)
	}
	bitmap := make([]byte, (clusters+7)/8)
	if n, err := stream.ReadAt(bitmap, 0); int64(n) < int64(len(bitmap)) {
		return Map{}, fmt.Errorf("NTFS $Bitmap: %d of %d bytes read (%v): is it corrupt? (ntfsfix -n)", n, len(bitmap), err)
	}
	var b builder
	addBits(&b, bitmap, uint64(clusters), 0, clusterBytes)
	// The backup boot sector, and whatever else lies past the clusters.
	b.add(clusters*clusterBytes, size-clusters*clusterBytes)
	return Map{FS: "NTFS", BlockSize: clusterBytes, Size: size, Used: b.used}, nil
}

// ntfsUnclean says why the volume's bitmap cannot be trusted as it
// stands, as ntfs-3g refuses to mount it: chkdsk is due ($Volume's dirty
// flag), its $LogFile holds transactions not yet applied, or Windows
// hibernated it (hiberfil.sys, which Fast Startup leaves too). "" if clean.
func ntfsUnclean(ctx *ntfs.NTFSContext) (string, error) {
	entry, err := ctx.GetMFT(ntfsVolumeRecord)
	if err != nil {
		return "", fmt.Errorf("NTFS $Volume: %v", err)
	}
	info, err := ntfs.OpenStream(ctx, entry, ntfsVolumeInfo, ntfs.WILDCARD_STREAM_ID, ntfs.WILDCARD_STREAM_NAME)
	if err != nil {
		return "", fmt.Errorf("NTFS $Volume information: %v", err)
	}
	buf := make([]byte, 12)
	if n, _ := info.ReadAt(buf, 0); n < len(buf) {
		return "", fmt.Errorf("NTFS $Volume information: %d bytes", n)
	}
	if binary.LittleEndian.Uint16(buf[10:])&ntfsVolumeDirty != 0 {
		return "it is marked dirty: run chkdsk on it in Windows", nil
	}
	if clean, err := ntfsLogClean(ctx); err != nil {
		return "", err
	} else if !clean {
		return "its $LogFile holds transactions not yet applied: start Windows and shut it down fully", nil
	}
	if hib, err := ntfs.GetDataForPath(ctx, "hiberfil.sys"); err == nil {
		magic := make([]byte, 4)
		if n, _ := hib.ReadAt(magic, 0); n == 4 && bytes.EqualFold(magic, []byte("hibr")) {
			return "Windows hibernated it (or Fast Startup did): start Windows and shut it down fully (shutdown /s /t 0)", nil
		}
	}
	return "", nil
}

const (
	ntfsLogRecord     = 2      // $LogFile
	ntfsLogNoClient   = 0xFFFF // no client in use
	ntfsLogVolumeIsOK = 0x0002 // RESTART_VOLUME_IS_CLEAN
)

// ntfsLogClean reads the first restart page of $LogFile: clean when it was
// never written (all 0xFF, as mkntfs and ntfs-3g leave it), or when its
// restart area has no client in use or says the volume is clean.
func ntfsLogClean(ctx *ntfs.NTFSContext) (bool, error) {
	entry, err := ctx.GetMFT(ntfsLogRecord)
	if err != nil {
		return false, fmt.Errorf("NTFS $LogFile: %v", err)
	}
	log, err := ntfs.OpenStream(ctx, entry, ntfs.ATTR_TYPE_DATA, ntfs.WILDCARD_STREAM_ID, ntfs.WILDCARD_STREAM_NAME)
	if err != nil {
		return false, fmt.Errorf("NTFS $LogFile: %v", err)
	}
	page := make([]byte, 512)
	if n, _ := log.ReadAt(page, 0); n < len(page) {
		return false, fmt.Errorf("NTFS $LogFile: %d bytes", n)
	}
	if bytes.Count(page, []byte{0xFF}) == len(page) {
		return true, nil
	}
	if string(page[:4]) != "RSTR" {
		return false, nil // CHKD (chkdsk stopped mid-way), or not a log
	}
	le := binary.LittleEndian
	area := int(le.Uint16(page[0x18:]))
	if area+16 > len(page) {
		return false, nil
	}
	inUse, flags := le.Uint16(page[area+12:]), le.Uint16(page[area+14:])
	return inUse == ntfsLogNoClient || flags&ntfsLogVolumeIsOK != 0, nil
}
