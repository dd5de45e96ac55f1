package probe

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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

// TestProfileOfAPatternThatRepeatsWithTheStretch: a sparse image whose data
// and holes take turns with the samples' stride. A sample at the same
// place of every stretch would find all data (or all zeros) everywhere;
// the profile counts each stretch's holes and samples its data instead.
func TestProfileOfAPatternThatRepeatsWithTheStretch(t *testing.T) {
	const stride = 3 << 20 // the samples' step for an image of 64 strides
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20) // incompressible: the factor is the holes'
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, tt := range []struct {
		name     string
		dataAt   int64 // where each stride's data starts
		wantZero float64
	}{
		{"data first", 0, 2.0 / 3},
		{"holes first", 2 << 20, 2.0 / 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			for i := int64(0); i < 64; i++ {
				if _, err := f.WriteAt(data, i*stride+tt.dataAt); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(64 * stride); err != nil {
				t.Fatal(err)
			}
			f.Close()
			p := profileFile(t, path)
			if p.HoleFraction == 0 {
				t.Skip("this file system does not tell where a file's holes are")
			}
			if math.Abs(p.ZeroFraction-tt.wantZero) > 0.02 {
				t.Errorf("zero fraction %.3f, want %.3f", p.ZeroFraction, tt.wantZero)
			}
			if want := 1 / (1 - tt.wantZero); math.Abs(p.Factor-want) > 0.1*want {
				t.Errorf("compression factor %.2f, want about %.2f (incompressible data between holes)", p.Factor, want)
			}
			for i, pc := range p.Pieces {
				if math.Abs(pc.ZeroFraction-tt.wantZero) > 0.02 {
					t.Errorf("piece %d of %d: zero fraction %.3f, want %.3f", i, len(p.Pieces), pc.ZeroFraction, tt.wantZero)
				}
			}
		})
	}
}
