package stream

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"dolly/imaging"
)

// BenchmarkCompressSparse is the source's compressing path on an image
// that is 70% holes in whole chunks, as a fresh file system's image is,
// against the same image with its zeros written out (dense): the holes of
// the sparse one are not read. cpu-ms/GiB is the process's CPU per GiB of
// image, every goroutine's.
func BenchmarkCompressSparse(b *testing.B) {
	const chunk = imaging.ChunkSize
	const size = 64 * chunk
	dir := b.TempDir()
	sparse, dense := filepath.Join(dir, "sparse"), filepath.Join(dir, "dense")
	raw := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	for c := int64(0); c < size; c += chunk {
		if rng.IntN(10) < 3 {
			for i := c; i < c+chunk; i++ {
				raw[i] = byte(rng.IntN(16))
			}
		}
	}
	f, err := os.Create(sparse)
	if err != nil {
		b.Fatal(err)
	}
	for c := int64(0); c < size; c += chunk {
		if !imaging.IsZero(raw[c : c+chunk]) {
			if _, err := f.WriteAt(raw[c:c+chunk], c); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(dense, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, tt := range []struct{ name, path string }{{"dense", dense}, {"sparse", sparse}} {
		b.Run(tt.name, func(b *testing.B) {
			im, err := imaging.OpenImage(tt.path)
			if err != nil {
				b.Fatal(err)
			}
			defer im.Close()
			b.SetBytes(size)
			cpu := processCPU(b)
			for b.Loop() {
				enc, err := NewEncoder(im, CastID{}, DefaultFrameSize, imaging.Zstd)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := enc.Next(); errors.Is(err, io.EOF) {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
				enc.Close()
			}
			used := processCPU(b) - cpu
			b.ReportMetric(float64(used.Milliseconds())/float64(b.N)*float64(1<<30)/size, "cpu-ms/GiB")
		})
	}
}
