package stream

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReceive is a node's receive path without its disk: frames
// checked, decoded and scanned for zeros, on an image half free space.
// cpu-ms/GiB is the process's CPU per GiB of image, every goroutine's.
func BenchmarkReceive(b *testing.B) {
	const size = 128 << 20
	dir := b.TempDir()
	raw := filepath.Join(dir, "img")
	if err := testimage.Write(raw, size, 11, testimage.Typical); err != nil {
		b.Fatal(err)
	}
	images := []benchImage{{"raw", raw, imaging.Raw}, {"zstd-on-the-fly", raw, imaging.Zstd}}
	if zst := zstdToolImage(b, raw); zst != "" {
		images = append(images, benchImage{"zstd-stored", zst, imaging.Zstd})
	}
	for _, im := range images {
		b.Run(im.name, func(b *testing.B) {
			h, stream, _ := encodeStreamAs(b, im.path, DefaultFrameSize, im.send)
			b.SetBytes(size)
			b.ResetTimer()
			cpu := processCPU(b)
			for b.Loop() {
				if _, _, err := Receive(&lendingReader{b: stream}, h, nil, discard{}, nil, Hooks{}); err != nil {
					b.Fatal(err)
				}
			}
			used := processCPU(b) - cpu
			b.ReportMetric(float64(used.Milliseconds())/float64(b.N)*float64(1<<30)/size, "cpu-ms/GiB")
		})
	}
}

// BenchmarkReceiveToDisk is BenchmarkReceive writing to a block device
// with O_DIRECT, as a node does: a loop device over a file in memory
// (/dev/shm), so that the disk costs little and the node's own work shows.
func BenchmarkReceiveToDisk(b *testing.B) {
	const size = 128 << 20
	dir := b.TempDir()
	raw := filepath.Join(dir, "img")
	if err := testimage.Write(raw, size, 11, testimage.Typical); err != nil {
		b.Fatal(err)
	}
	backing, err := os.CreateTemp("/dev/shm", "dolly-bench-*")
	if err != nil {
		b.Skipf("skipped: no /dev/shm for the loop device's file: %v", err)
	}
	b.Cleanup(func() { os.Remove(backing.Name()) })
	if err := backing.Truncate(size); err != nil {
		b.Fatal(err)
	}
	backing.Close()
	dev := testenv.LoopDevice(b, backing.Name())
	images := []benchImage{
		{"raw", raw, imaging.Raw},
		{"zstd", raw, imaging.Zstd}, // compressed on the fly
		{"zstd-packed", packed(b, raw), imaging.Zstd},
	}
	// The same image from zstd's tool: one frame, too large to decode
	// whole, so its bytes are copied into the disk's buffers.
	if zst := zstdToolImage(b, raw); zst != "" {
		images = append(images, benchImage{"zstd-tool", zst, imaging.Zstd})
	}
	for _, im := range images {
		b.Run(im.name, func(b *testing.B) {
			h, stream, _ := encodeStreamAs(b, im.path, DefaultFrameSize, im.send)
			b.SetBytes(size)
			b.ResetTimer()
			cpu := processCPU(b)
			for b.Loop() {
				tg, err := imaging.OpenTarget(dev, size, imaging.TargetOptions{Direct: true, Shared: true})
				if err != nil {
					b.Fatal(err)
				}
				if !tg.Direct() {
					b.Skip("skipped: the loop device refuses O_DIRECT")
				}
				if _, _, err := Receive(&lendingReader{b: stream}, h, nil, tg, nil, Hooks{}); err != nil {
					b.Fatal(err)
				}
				if err := tg.Close(); err != nil {
					b.Fatal(err)
				}
			}
			used := processCPU(b) - cpu
			b.ReportMetric(float64(used.Milliseconds())/float64(b.N)*float64(1<<30)/size, "cpu-ms/GiB")
		})
	}
}

// packed stores the raw image at path as dolly-server -pack does (without
// a block map) and returns the stored file's path.
func packed(b *testing.B, path string) string {
	b.Helper()
	in, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(path + ".packed.zst")
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if _, err := CompressChunks(b.Context(), out, in, imaging.Zstd, imaging.Stored); err != nil {
		b.Fatal(err)
	}
	return out.Name()
}

// benchImage is an image a benchmark receives, sent as send.
type benchImage struct {
	name string
	path string
	send imaging.Encoding
}

// zstdToolImage compresses the raw image at path with zstd's own tool, as
// users make a stored image (one frame whose free space is blocks of
// zeros), and returns its path; "" without the tool.
func zstdToolImage(b *testing.B, path string) string {
	b.Helper()
	if _, err := exec.LookPath("zstd"); err != nil {
		b.Log("zstd's tool is missing: no case of its image (apt-get install zstd)")
		return ""
	}
	zst := path + ".zst"
	if out, err := exec.Command("zstd", "-q", "-f", "-3", path, "-o", zst).CombinedOutput(); err != nil {
		b.Fatalf("zstd: %v: %s", err, out)
	}
	return zst
}
