package probe

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testimage"
)

func TestProfile(t *testing.T) {
	dir := t.TempDir()
	rawPath := filepath.Join(dir, "img")
	if err := testimage.Write(rawPath, 40<<20, 6, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(rawPath)
	if err != nil {
		t.Fatal(err)
	}
	var zeros int
	imaging.Segments(raw, 0, imaging.MinZeroRun, true, func(s imaging.Segment) {
		if s.Zero {
			zeros += s.Len
		}
	})
	wantZero := float64(zeros) / float64(len(raw))
	for _, enc := range []imaging.Encoding{imaging.Raw, imaging.Zstd} {
		t.Run(enc.String(), func(t *testing.T) {
			p := profileAs(t, rawPath, enc)
			if p.Size != int64(len(raw)) || p.Codec != imaging.Zstd || p.Sampled != (enc == imaging.Raw) {
				t.Fatalf("profile %+v", p)
			}
			// Samples of a raw image estimate; a scanned one is exact.
			tol := 0.15
			if enc != imaging.Raw {
				tol = 0.01
			}
			if d := p.ZeroFraction - wantZero; d < -tol || d > tol {
				t.Errorf("zero fraction %.3f, want %.3f", p.ZeroFraction, wantZero)
			}
			if p.Factor < 1.5 {
				t.Errorf("compression factor %.2f of a half-empty image", p.Factor)
			}
			if p.DecodeRate <= 0 || p.DecodeFactor <= 0 {
				t.Errorf("decode rate %.0f, factor %.2f: want both measured", p.DecodeRate, p.DecodeFactor)
			}
			// Only a raw image may be compressed on the fly.
			if (p.EncodeRate > 0) != (enc == imaging.Raw) {
				t.Errorf("encode rate %.0f of an image stored %s", p.EncodeRate, enc)
			}
		})
	}
}

// profileAs profiles the raw image at rawPath stored as enc.
func profileAs(t *testing.T, rawPath string, enc imaging.Encoding) Profile {
	t.Helper()
	path := rawPath
	if enc != imaging.Raw {
		path = rawPath + "." + enc.String()
		if err := testimage.Compress(rawPath, path, enc); err != nil {
			t.Fatal(err)
		}
	}
	return profileFile(t, path)
}

// profileFile profiles the image file at path.
func profileFile(t *testing.T, path string) Profile {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	p, err := Image(t.Context(), im, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProfileTellsTheRLEBlocks: a stored zstd image whose free space is in
// RLE blocks, as zstd's own tool writes it, is profiled with their share
// and their decoding speed against the standard sample's; one without has
// neither.
func TestProfileTellsTheRLEBlocks(t *testing.T) {
	dir := t.TempDir()
	rawPath := filepath.Join(dir, "img")
	if err := testimage.Write(rawPath, 8<<20, 6, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(rawPath)
	if err != nil {
		t.Fatal(err)
	}
	var packed bytes.Buffer
	if err := imaging.Compress(&packed, imaging.Zstd, bytes.NewReader(data), 1); err != nil {
		t.Fatal(err)
	}
	const free = 24 << 20
	rle, err := imaging.ZstdRLEStream(free)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stored []byte
		want   float64
	}{
		{"free space in RLE blocks", append(slices.Clone(packed.Bytes()), rle...), float64(free) / float64(len(data)+free)},
		{"no RLE blocks", packed.Bytes(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "img.zst")
			if err := os.WriteFile(path, tc.stored, 0o644); err != nil {
				t.Fatal(err)
			}
			p := profileFile(t, path)
			if math.Abs(p.RLEFraction-tc.want) > 1e-9 {
				t.Errorf("RLE share %.4f, want %.4f", p.RLEFraction, tc.want)
			}
			if (p.RLEFactor > 0) != (tc.want > 0) {
				t.Errorf("RLE factor %.2f with an RLE share of %.2f", p.RLEFactor, tc.want)
			}
		})
	}
}

// decodeRate decodes a raw image's samples over the cycling stream, part
// by part in every pass: a part of data costs more than a part of zeros,
// whose zero frames a node never decodes.
func TestDecodeRateTimesEachPart(t *testing.T) {
	ce, err := imaging.NewChunkEncoder(imaging.Zstd, imaging.OnTheFly)
	if err != nil {
		t.Fatal(err)
	}
	data, zeros := make([]byte, 1<<20), make([]byte, 1<<20)
	StandardSample(data, 3)
	stream, err := ce.Encode(nil, data, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if stream, err = ce.Encode(stream, zeros, int64(len(data)), true); err != nil {
		t.Fatal(err)
	}
	rate, factor, cpu := decodeRate(imaging.Zstd, stream, []int{len(data), len(zeros)})
	var clock bool
	OnOneThread(func(c func() time.Duration) { clock = c() > 0 })
	if !clock {
		t.Skip("no thread clock here: nothing is timed")
	}
	if rate <= 0 || factor <= 0 || len(cpu) != 2 {
		t.Fatalf("rate %.0f, factor %.2f, parts %v: want both measured and two parts", rate, factor, cpu)
	}
	if cpu[0] <= cpu[1] {
		t.Errorf("the data took %v a pass and the zeros %v: want the data dearer", cpu[0], cpu[1])
	}
	if r, _, c := decodeRate(imaging.Zstd, nil, []int{1}); r != 0 || c != nil {
		t.Errorf("an empty stream decodes at %.0f, parts %v: want nothing timed", r, c)
	}
}

// A stored zstd image in frames of a chunk or less, as dolly captures
// one, is profiled with their share: a node writing with O_DIRECT decodes
// those whole. One large frame, as zstd's own tool writes it, has none.
func TestProfileTellsTheFramesDecodedWhole(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 6<<20)
	StandardSample(data, 3)
	var large bytes.Buffer
	if err := imaging.Compress(&large, imaging.Zstd, bytes.NewReader(data), 1); err != nil {
		t.Fatal(err)
	}
	enc, err := imaging.NewChunkEncoder(imaging.Zstd, imaging.OnTheFly)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []byte
	for off := 0; off < len(data); off += imaging.ChunkSize {
		if chunks, err = enc.Encode(chunks, data[off:off+imaging.ChunkSize], int64(off), off+imaging.ChunkSize == len(data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		stored []byte
		want   float64
	}{
		{"frames of a chunk", chunks, 1},
		{"one large frame", large.Bytes(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "img.zst")
			if err := os.WriteFile(path, tc.stored, 0o644); err != nil {
				t.Fatal(err)
			}
			if p := profileFile(t, path); p.WholeFraction != tc.want {
				t.Errorf("share in frames decoded whole %.4f, want %.4f", p.WholeFraction, tc.want)
			}
		})
	}
}

// TestProfileOfAPatternThatRepeatsWithTheStretch: an image whose data and
// zeros take turns with the samples' stride, as holes of a sparse file and
// as zeros written out. A sample at the same place of every stretch would
// find all data (or all zeros) everywhere; the profile counts each
// stretch's holes and samples its data, from places that move.
func TestProfileOfAPatternThatRepeatsWithTheStretch(t *testing.T) {
	const (
		samples = 64
		stride  = 3 << 20 // the samples' step
	)
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20) // incompressible: the factor is the zeros'
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	const wantZero = 2.0 / 3
	for _, tt := range []struct {
		name   string
		dataAt int64 // where each stride's data starts
		sparse bool  // the zeros are holes
		tol    float64
	}{
		{"holes after the data", 0, true, 0.01},
		{"holes before the data", 2 << 20, true, 0.01},
		{"zeros written out", 0, false, 0.1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			zeros := make([]byte, 2<<20)
			for i := int64(0); i < samples; i++ {
				at := i * stride
				if !tt.sparse {
					if _, err := f.WriteAt(zeros, at+(tt.dataAt+1<<20)%stride); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := f.WriteAt(data, at+tt.dataAt); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(samples * stride); err != nil {
				t.Fatal(err)
			}
			im := closeAndOpen(t, f)
			holes, ok := im.HoleBytes(t.Context())
			if tt.sparse && (!ok || holes != samples*stride*2/3) {
				t.Skipf("this file system does not tell where the file's holes are (%d bytes of holes, %v)", holes, ok)
			}
			p, err := sampleImage(t.Context(), im, samples)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(p.ZeroFraction-wantZero) > tt.tol {
				t.Errorf("zero fraction %.3f, want %.3f", p.ZeroFraction, wantZero)
			}
			if want := 1 / (1 - wantZero); math.Abs(p.Factor-want) > 3*tt.tol*want {
				t.Errorf("compression factor %.2f, want about %.2f (incompressible data between zeros)", p.Factor, want)
			}
			if !tt.sparse {
				return // sampled: the pieces' figures scatter
			}
			for i, pc := range p.Pieces {
				if math.Abs(pc.ZeroFraction-wantZero) > tt.tol {
					t.Errorf("piece %d of %d: zero fraction %.3f, want %.3f", i, len(p.Pieces), pc.ZeroFraction, wantZero)
				}
			}
		})
	}
}

func TestHoleMap(t *testing.T) {
	h := holeMap{{10, 20}, {20, 30}, {50, 60}}
	tests := []struct {
		from, to       int64
		in             int64
		dataFrom, hole int64 // from from
	}{
		{0, 100, 30, 0, 10},
		{0, 10, 0, 0, 10},
		{10, 10, 0, 30, 10},
		{15, 55, 20, 30, 15},
		{30, 50, 0, 30, 50},
		{59, 61, 1, 60, 59},
		{60, 70, 0, 60, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := h.in(tt.from, tt.to); got != tt.in {
			t.Errorf("in(%d, %d) = %d, want %d", tt.from, tt.to, got, tt.in)
		}
		if got := h.dataFrom(tt.from); got != tt.dataFrom {
			t.Errorf("dataFrom(%d) = %d, want %d", tt.from, got, tt.dataFrom)
		}
		if got := h.holeFrom(tt.from); got != tt.hole {
			t.Errorf("holeFrom(%d) = %d, want %d", tt.from, got, tt.hole)
		}
	}
	var none holeMap
	if none.in(0, 100) != 0 || none.dataFrom(5) != 5 || none.holeFrom(5) != math.MaxInt64 {
		t.Error("no holes known: want none counted, data everywhere")
	}
}

func TestSamplePlaceStaysInItsStretch(t *testing.T) {
	for _, stretch := range []int64{imaging.ChunkSize, imaging.ChunkSize + 4096, 3 << 20, 48 << 20} {
		seen := map[int64]bool{}
		for i := range 64 {
			start := int64(i) * stretch
			off := samplePlace(start, start+stretch, i)
			if off < start || off >= start+stretch || off%imaging.ZeroBlock != 0 {
				t.Fatalf("stretch %d of %d bytes: sample at %d", i, stretch, off)
			}
			seen[off-start] = true
		}
		if stretch >= 3<<20 && len(seen) < 32 {
			t.Errorf("stretches of %d bytes: samples at %d places of 64, want them spread", stretch, len(seen))
		}
	}
}

func TestReadingsStandForTheStretch(t *testing.T) {
	tests := []struct {
		name        string
		got         readings
		size, holes int64
		want        tallyPart
		scale       float64
	}{
		{"no holes", readings{raw: 100, zero: 10, packed: 50}, 400, 0, tallyPart{size: 400, raw: 400, zero: 40, packed: 200}, 4},
		{"half holes", readings{raw: 100, zero: 10, packed: 50}, 400, 200, tallyPart{size: 400, raw: 400, zero: 220, packed: 100}, 2},
		{"all holes", readings{}, 400, 400, tallyPart{size: 400, raw: 400, zero: 400}, 0},
	}
	for _, tt := range tests {
		part, scale := tt.got.stands(tt.size, tt.holes)
		if part != tt.want || scale != tt.scale {
			t.Errorf("%s: %+v, %v; want %+v, %v", tt.name, part, scale, tt.want, tt.scale)
		}
	}
}

// TestProfileFactorIsTheCasts checks that a raw image's factor is what a
// cast compressing it on the fly sends, chunk by chunk, for data that
// compresses better in a whole chunk than in smaller pieces: blocks that
// repeat a little over a megabyte apart.
func TestProfileFactorIsTheCasts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	block := make([]byte, 640<<10)
	for _, tt := range []struct {
		name string
		size int64 // past profileSamples chunks, the image is sampled
	}{
		{"read whole", 48 << 20},
		{"sampled", 2 * profileSamples * imaging.ChunkSize},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			for off := int64(0); off < tt.size; off += imaging.ChunkSize {
				for i := range block {
					block[i] = byte(rng.Uint32())
				}
				for at := off; at < off+imaging.ChunkSize; at += int64(len(block)) {
					n := min(int64(len(block)), off+imaging.ChunkSize-at)
					if _, err := f.WriteAt(block[:n], at); err != nil {
						t.Fatal(err)
					}
				}
			}
			im := closeAndOpen(t, f)
			p, err := sampleImage(t.Context(), im, profileSamples)
			if err != nil {
				t.Fatal(err)
			}
			var sent countingWriter
			if _, err := stream.CompressChunks(t.Context(), &sent, io.NewSectionReader(im, 0, im.Size), imaging.Zstd, imaging.OnTheFly); err != nil {
				t.Fatal(err)
			}
			cast := float64(im.Size) / float64(sent)
			if math.Abs(p.Factor/cast-1) > 0.03 {
				t.Errorf("factor %.3f, want %.3f (what the cast sends)", p.Factor, cast)
			}
		})
	}
}

// closeAndOpen closes f, an image file just written, and opens it as an
// image, closed when the test ends.
func closeAndOpen(t *testing.T, f *os.File) *imaging.Image {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	im, err := imaging.OpenImage(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	return im
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
