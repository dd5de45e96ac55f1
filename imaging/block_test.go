package imaging

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// BenchmarkBlockDeviceWrite writes 256 MiB to a loop device through the
// page cache and with O_DIRECT, synced, and reports the machine's CPU time
// per MB (kernel threads included: writeback and the loop worker do most
// of the work) and the ratio of the two.
func BenchmarkBlockDeviceWrite(b *testing.B) {
	const size = 256 << 20
	backing := filepath.Join(b.TempDir(), "disk")
	fill(b, backing, 0, size)
	dev := testenv.LoopDevice(b, backing)
	chunk := sampleImage(3, 4<<20)
	cpuPerMB := map[bool]float64{}
	for _, direct := range []bool{false, true} {
		b.Run(fmt.Sprintf("direct=%v", direct), func(b *testing.B) {
			b.SetBytes(size)
			var cpu time.Duration
			for b.Loop() {
				tg, err := OpenTarget(dev, size, TargetOptions{Direct: direct})
				if err != nil {
					b.Fatal(err)
				}
				start := MachineCPU()
				for off := int64(0); off < size; off += int64(len(chunk)) {
					if _, err := tg.WriteAt(chunk, off); err != nil {
						b.Fatal(err)
					}
				}
				if err := tg.Sync(); err != nil {
					b.Fatal(err)
				}
				cpu += MachineCPU() - start
				tg.Close()
			}
			cpuPerMB[direct] = cpu.Seconds() * 1e3 / (float64(b.N) * size / 1e6)
			b.ReportMetric(cpuPerMB[direct], "cpu-ms/MB")
			if direct && cpuPerMB[false] > 0 {
				b.ReportMetric(cpuPerMB[false]/cpuPerMB[true], "x-less-cpu-than-cached")
			}
		})
	}
}
