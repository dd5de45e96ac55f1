package imaging

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"dolly/internal/testenv"
)

// On a block device zero runs go through BLKZEROOUT and data goes through
// O_DIRECT (or the page cache); the device must still read back exactly the
// image over old data.
func TestBlockDeviceTarget(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { testBlockDeviceTarget(t, direct) })
	}
}

func testBlockDeviceTarget(t *testing.T, direct bool) {
	img := sampleImage(9, 9<<20+512*3)
	backing := filepath.Join(t.TempDir(), "disk")
	fill(t, backing, 0xFF, 12<<20)
	dev := testenv.LoopDevice(t, backing)

	info, err := CheckTarget(dev, int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if !info.Block || info.Size != 12<<20 {
		t.Fatalf("target info %+v", info)
	}
	if _, err := CheckTarget(dev, 13<<20); err == nil {
		t.Fatal("a 12 MiB device was accepted for a 13 MiB image")
	}
	tg, err := OpenTarget(dev, int64(len(img)), TargetOptions{Direct: direct})
	if err != nil {
		t.Fatal(err)
	}
	if tg.Direct() != direct {
		t.Fatalf("Direct() = %v, want %v", tg.Direct(), direct)
	}
	w := NewSparseWriter(tg, NewDigester(), int64(len(img)))
	if _, err := w.Write(img); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tg.Sync(); err != nil {
		t.Fatal(err)
	}
	tg.Close()
	got, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got[:len(img)]) != sha256.Sum256(img) {
		t.Fatal("the device does not read back the image")
	}
	if !bytes.Equal(got[len(img):], bytes.Repeat([]byte{0xFF}, len(got)-len(img))) {
		t.Fatal("bytes beyond the image changed")
	}
}
