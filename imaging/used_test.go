package imaging

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"dolly/imaging/blockmap"
)

// dirtyExt4 makes an ext4 image whose free blocks hold old random data: a
// large random file written and deleted, then a smaller one kept.
func dirtyExt4(t *testing.T, size int64) (img string, kept []byte) {
	t.Helper()
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install e2fsprogs", tool)
		}
	}
	dir := t.TempDir()
	img = filepath.Join(dir, "fs.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, size)
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", img).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	old, keep := filepath.Join(dir, "old"), filepath.Join(dir, "keep")
	junk := make([]byte, size/2)
	rand.Read(junk)
	os.WriteFile(old, junk, 0o644)
	kept = make([]byte, size/8)
	rand.Read(kept)
	os.WriteFile(keep, kept, 0o644)
	for _, req := range []string{"write " + old + " old", "rm old", "write " + keep + " keep"} {
		if out, err := exec.Command("debugfs", "-w", "-R", req, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs %s: %v\n%s", req, err, out)
		}
	}
	return img, kept
}

// Through its map, a dirty image reads as its file system uses it: used
// blocks as stored, free ones as zeros; the stream's holes take in the
// free space; and the fingerprint tells mapped from unmapped.
func TestImageReadThroughItsMap(t *testing.T) {
	const size = 32 << 20
	path, kept := dirtyExt4(t, size)
	stored, _ := os.ReadFile(path)
	im, err := OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	plain, _ := im.Fingerprint()
	m, err := im.ReadMap()
	if err != nil {
		t.Fatal(err)
	}
	if err := im.UseMap(m); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(im.Stream())
	if err != nil || len(got) != size {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	var free, junk int64
	for off := int64(0); off < size; off += m.BlockSize {
		start, _ := m.NextUsed(off)
		block, want := got[off:off+m.BlockSize], stored[off:off+m.BlockSize]
		if start == off {
			if !bytes.Equal(block, want) {
				t.Fatalf("used block at %d differs from the file", off)
			}
			continue
		}
		free += m.BlockSize
		if !bytes.Equal(block, make([]byte, m.BlockSize)) {
			t.Fatalf("free block at %d reads %x…, want zeros", off, block[:8])
		}
		if !bytes.Equal(want, make([]byte, m.BlockSize)) {
			junk += m.BlockSize
		}
	}
	if junk < size/4 {
		t.Fatalf("only %d bytes of old data in the free blocks: the image is not dirty", junk)
	}
	if !bytes.Contains(got, kept[:4096]) {
		t.Error("the kept file's first block is not in the image read through the map")
	}
	holes, ok := im.HoleBytes(t.Context())
	if !ok || holes < free*9/10 {
		t.Errorf("holes %d (%v), want most of the %d free bytes", holes, ok, free)
	}
	p := make([]byte, 3*m.BlockSize)
	if _, err := im.ReadAt(p, size-3*m.BlockSize); err != nil {
		t.Errorf("ReadAt at the end: %v", err)
	}
	if mapped, _ := im.Fingerprint(); mapped == plain {
		t.Error("the fingerprint is the same with the map and without")
	}
	if err := im.UseMap(blockmap.Map{Size: size + 1}); err == nil {
		t.Error("a map of another size was taken")
	}
}
