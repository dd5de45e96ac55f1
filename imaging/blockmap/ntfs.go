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

// readNTFS maps an NTFS volume from its $Bitmap.
func readNTFS(r io.ReaderAt, head []byte, size int64) (Map, error) {
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
		return Map{}, fmt.Errorf("NTFS: %v: is it corrupt? (ntfsfix -n)", err)
	}
	defer ctx.Close()
	if dirty, err := ntfsDirty(ctx); err != nil {
		return Map{}, err
	} else if dirty {
		return Map{}, fmt.Errorf("NTFS: %w (or Windows hibernated it): run chkdsk, or ntfsfix -d", ErrDirty)
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

// ntfsDirty reads the dirty flag of $Volume's information.
func ntfsDirty(ctx *ntfs.NTFSContext) (bool, error) {
	entry, err := ctx.GetMFT(ntfsVolumeRecord)
	if err != nil {
		return false, fmt.Errorf("NTFS $Volume: %v", err)
	}
	info, err := ntfs.OpenStream(ctx, entry, ntfsVolumeInfo, ntfs.WILDCARD_STREAM_ID, ntfs.WILDCARD_STREAM_NAME)
	if err != nil {
		return false, fmt.Errorf("NTFS $Volume information: %v", err)
	}
	buf := make([]byte, 12)
	if n, _ := info.ReadAt(buf, 0); n < len(buf) {
		return false, fmt.Errorf("NTFS $Volume information: %d bytes", n)
	}
	return binary.LittleEndian.Uint16(buf[10:])&ntfsVolumeDirty != 0, nil
}
