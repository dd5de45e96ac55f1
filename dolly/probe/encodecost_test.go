package probe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"dolly/imaging"
	"dolly/internal/testimage"
)

// openTestImage writes a raw test image and opens it.
func openTestImage(t *testing.T, size int64, seed uint64, mix testimage.Mix) (string, *imaging.Image) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	if err := testimage.Write(path, size, seed, mix); err != nil {
		t.Fatal(err)
	}
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	return path, im
}

func TestTimeCompression(t *testing.T) {
	rawPath, im := openTestImage(t, 24<<20, 3, testimage.Typical)
	p, err := Image(t.Context(), im, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.samples) == 0 {
		t.Fatal("the profile of a raw image kept no samples")
	}
	p.EncodeRate = 0
	if err := TimeCompression(t.Context(), im, &p, imaging.Zstd, 1<<20); err != nil {
		t.Fatal(err)
	}
	if p.EncodeRate <= 0 {
		t.Fatalf("encode rate %.0f after timing the compressing path", p.EncodeRate)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := TimeCompression(ctx, im, &p, imaging.Zstd, 1<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}

	// A compressed image keeps no samples: nothing to time, nothing set.
	q := profileAs(t, rawPath, imaging.Zstd)
	q.EncodeRate = 0
	if err := TimeCompression(t.Context(), im, &q, imaging.Zstd, 1<<20); err != nil || q.EncodeRate != 0 {
		t.Errorf("compressed image: rate %.0f, %v", q.EncodeRate, err)
	}
}

// The compressing path is fed the very bytes Image sampled, in order.
func TestSampleReaderYieldsTheSamples(t *testing.T) {
	path, im := openTestImage(t, 4<<20, 5, testimage.Dense)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	samples := []sample{{off: 4096, len: 100000, zero: 7}, {off: 1 << 20, len: 3}, {off: 4<<20 - 512, len: 512, zero: 512}}
	var want []byte
	for _, s := range samples {
		want = append(want, raw[s.off:s.off+s.len]...)
	}
	r := &sampleReader{ctx: t.Context(), im: im, samples: samples, start: ProcessCPU()}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d of the samples", len(got), len(want))
	}
	if r.read != int64(len(want)) || r.zero != 519 {
		t.Errorf("counted %d bytes, %d zero; want %d, 519", r.read, r.zero, len(want))
	}
	// A sample past the image's end is an error, not a short stream.
	r = &sampleReader{ctx: t.Context(), im: im, samples: []sample{{off: 4<<20 - 10, len: 20}}, start: ProcessCPU()}
	if _, err := io.ReadAll(r); err == nil {
		t.Error("a sample past the end read whole")
	}
}
