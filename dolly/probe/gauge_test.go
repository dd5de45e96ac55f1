package probe

import (
	"bytes"
	"io"
	"testing"
	"time"

	"dolly/imaging"
)

// The sample decoder yields the standard sample again and again, across
// the seams between its repetitions, for every codec.
func TestSampleDecoderRepeatsTheSample(t *testing.T) {
	want := make([]byte, standardSampleSize)
	StandardSample(want, 1)
	for _, enc := range []imaging.Encoding{imaging.Zstd, imaging.Gzip} {
		t.Run(enc.String(), func(t *testing.T) {
			s, err := NewSampleDecoder(enc, false)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Pieces that do not divide the sample, so reads straddle seams.
			buf := make([]byte, 3*standardSampleSize/2+12345)
			var got []byte
			for range 3 {
				n, err := s.Decode(buf)
				if err != nil || n != len(buf) {
					t.Fatalf("Decode = %d, %v; want %d bytes", n, err, len(buf))
				}
				got = append(got, buf...)
			}
			for off := 0; off < len(got); off += len(want) {
				end := min(off+len(want), len(got))
				if !bytes.Equal(got[off:end], want[:end-off]) {
					t.Fatalf("bytes %d..%d are not the sample", off, end)
				}
			}
		})
	}
	if _, err := NewSampleDecoder(imaging.Raw, false); err == nil {
		t.Error("NewSampleDecoder(raw) succeeded")
	}
}

// fakeCPU is a thread clock that the fake decoders below advance by the
// time their bytes would take at a given rate.
type fakeCPU struct{ now time.Duration }

func (c *fakeCPU) clock() time.Duration { return c.now }
func (c *fakeCPU) spend(n int, rate float64) {
	c.now += time.Duration(float64(n) / rate * float64(time.Second))
}

type fakeImage struct {
	cpu   *fakeCPU
	rate  float64
	left  int
	cools *fakeSample // its state leaves the caches each piece; may be nil
}

func (f *fakeImage) Read(p []byte) (int, error) {
	if f.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), f.left)
	f.left -= n
	f.cpu.spend(n, f.rate)
	if f.cools != nil {
		f.cools.warm = 0
	}
	return n, nil
}

// fakeSample decodes at rate, but the first 64 KiB after the image's
// decoder ran cost coldPenalty as much: its state is out of the caches.
type fakeSample struct {
	cpu         *fakeCPU
	rate        float64
	coldPenalty float64
	warm        int // bytes decoded since the image's last piece
	closed      bool
}

func (f *fakeSample) Decode(p []byte) (int, error) {
	f.cpu.spend(len(p), f.rate)
	if cold := max(0, min(len(p), 64<<10-f.warm)); cold > 0 && f.coldPenalty > 1 {
		f.cpu.spend(cold, f.rate/(f.coldPenalty-1))
	}
	f.warm += len(p)
	return len(p), nil
}
func (f *fakeSample) Close() error { f.closed = true; return nil }

func TestDecodeGauge(t *testing.T) {
	tests := []struct {
		name                   string
		imageRate, sampleRate  float64
		imageBytes, pieceBytes int
		coldPenalty            float64 // of the sample's first bytes after an image piece
		// halfSpeed gives the gauge a second sample decoder, which the
		// first runs at half the speed of.
		halfSpeed bool
	}{
		{"image decodes faster", 3e9, 1e9, 256 << 20, 1 << 20, 0, false},
		{"image decodes slower", 0.5e9, 1e9, 64 << 20, 1 << 20, 0, false},
		{"one piece", 1e9, 1e9, 100 << 10, 1 << 20, 0, false},
		// Timed cold, the sample would read 19% slow (3 × 64 KiB more per MiB).
		{"sample cold after each image piece", 1e9, 1e9, 64 << 20, 1 << 20, 4, false},
		{"one sample decoder at half speed", 2e9, 1e9, 64 << 20, 1 << 20, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu := &fakeCPU{}
			sample := &fakeSample{cpu: cpu, rate: tt.sampleRate, coldPenalty: tt.coldPenalty}
			g := &decodeGauge{cpu: cpu.clock, sample: sample}
			other := &fakeSample{cpu: cpu, rate: tt.sampleRate}
			if tt.halfSpeed {
				sample.rate /= 2
				g.other = other
			}
			img := &fakeImage{cpu: cpu, rate: tt.imageRate, left: tt.imageBytes, cools: sample}
			buf := make([]byte, tt.pieceBytes)
			var read int
			for {
				n, err := g.read(img, buf)
				read += n
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if read != tt.imageBytes {
				t.Fatalf("read %d bytes, want %d", read, tt.imageBytes)
			}
			if r := g.rate(); !near(r, tt.imageRate, 0.01) {
				t.Errorf("rate %.3g, want %.3g", r, tt.imageRate)
			}
			if f, want := g.factor(), tt.imageRate/tt.sampleRate; !near(f, want, 0.01) {
				t.Errorf("factor %.3f, want %.3f", f, want)
			}
			// The sample costs about an eighth of the image's time: at most
			// that and one piece more.
			piece := time.Duration(float64(tt.pieceBytes) / tt.sampleRate * float64(time.Second))
			if took := g.ref.cpu + g.otherRef.cpu; took > g.image.cpu/gaugeShare+2*piece {
				t.Errorf("sample took %v against the image's %v", took, g.image.cpu)
			}
			g.close()
			if !sample.closed || g.sample != nil || tt.halfSpeed && (!other.closed || g.other != nil) {
				t.Error("close left a sample decoder open")
			}
		})
	}
}

func near(got, want, tol float64) bool {
	return got >= want*(1-tol) && got <= want*(1+tol)
}

// Without a thread clock nothing can be timed: the gauge must not spend
// the sample's decoding on a factor it cannot tell.
func TestDecodeGaugeWithoutAClock(t *testing.T) {
	stopped := &fakeCPU{} // never advances
	sample := &fakeSample{cpu: stopped, rate: 1e9}
	g := &decodeGauge{cpu: stopped.clock, sample: sample}
	img := &fakeImage{cpu: &fakeCPU{}, rate: 1e9, left: 8 << 20}
	buf := make([]byte, 1<<20)
	for {
		if _, err := g.read(img, buf); err != nil {
			break
		}
	}
	if g.ref.bytes != 0 || g.factor() != 0 || g.rate() != 0 {
		t.Errorf("decoded %d sample bytes, factor %v, rate %v; want none and unknown", g.ref.bytes, g.factor(), g.rate())
	}
}

// A raw image's samples decode in a few milliseconds: decodePasses reads
// them again until the image has taken profileDecodeCPU, times the
// standard sample for about half as long, and gives each part's time in
// one pass.
func TestDecodePasses(t *testing.T) {
	tests := []struct {
		name       string
		imageRate  float64
		sizes      []int
		wantPasses int
	}{
		// 16 MiB at 5 GB/s: 3.4 ms a pass, so 24 passes.
		{"fast samples", 5e9, []int{6 << 20, 10 << 20}, 24},
		// 160 MiB at 1 GB/s: 168 ms, one pass is enough.
		{"slow samples", 1e9, []int{96 << 20, 64 << 20}, 1},
		// 1 MiB at 100 GB/s: 10 µs a pass, so the passes run out first.
		{"samples that cost next to nothing", 1e11, []int{1 << 20}, profileDecodePasses},
		// Without a thread clock every time reads 0: one pass.
		{"without a clock", 1e18, []int{1 << 20}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu := &fakeCPU{}
			sample := &fakeSample{cpu: cpu, rate: 1e9}
			g := &decodeGauge{cpu: cpu.clock, sample: sample, share: profileGaugeShare}
			img := &fakeImage{cpu: cpu, rate: tt.imageRate, left: 1 << 50}
			parts, ok := decodePasses(g, img, tt.sizes)
			if !ok {
				t.Fatal("decodePasses failed")
			}
			total := 0
			for _, s := range tt.sizes {
				total += s
			}
			passes := int(g.image.bytes) / total
			if int(g.image.bytes) != passes*total {
				t.Errorf("decoded %d bytes: not whole passes of %d", g.image.bytes, total)
			}
			if passes != tt.wantPasses {
				t.Errorf("%d passes took %v, want %d", passes, g.image.cpu, tt.wantPasses)
			}
			if tt.imageRate < 1e12 {
				for i, s := range tt.sizes {
					want := time.Duration(float64(s) / tt.imageRate * float64(time.Second))
					if d := parts[i] - want; d < -time.Microsecond || d > time.Microsecond {
						t.Errorf("part %d took %v a pass, want %v", i, parts[i], want)
					}
				}
				// The sample had about half the image's time, give or take
				// a piece of 1 MiB.
				piece := time.Duration(float64(1<<20) / 1e9 * float64(time.Second))
				if took, half := g.ref.cpu, g.image.cpu/profileGaugeShare; took > half+2*piece || took < half-2*piece {
					t.Errorf("the sample took %v against the image's %v", took, g.image.cpu)
				}
				if f, want := g.factor(), tt.imageRate/1e9; !near(f, want, 0.01) {
					t.Errorf("factor %.3f, want %.3f", f, want)
				}
			}
		})
	}
}
