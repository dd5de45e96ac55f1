package probe

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// BenchmarkBlockDeviceWrite writes 256 MiB to a loop device through the
// page cache and with O_DIRECT, synced, and reports the machine's CPU time
// per MB (kernel threads included: writeback and the loop worker do most
// of the work) and the ratio of the two.
func BenchmarkBlockDeviceWrite(b *testing.B) {
	const size = 256 << 20
	backing := filepath.Join(b.TempDir(), "disk")
	if err := testimage.Fill(backing, 0, size); err != nil {
		b.Fatal(err)
	}
	dev := testenv.LoopDevice(b, backing)
	chunk := make([]byte, 4<<20)
	StandardSample(chunk, 3)
	cpuPerMB := map[bool]float64{}
	for _, direct := range []bool{false, true} {
		b.Run(fmt.Sprintf("direct=%v", direct), func(b *testing.B) {
			b.SetBytes(size)
			var cpu time.Duration
			for b.Loop() {
				tg, err := imaging.OpenTarget(dev, size, imaging.TargetOptions{Direct: direct})
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
