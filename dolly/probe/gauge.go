package probe

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"dolly/imaging"
)

// StandardSample fills p with data like a filesystem's: half text, half
// binary, no zero runs (those cost a node nothing), about 2:1
// compressible. Probes time codecs on it, so hosts compare, and an image's
// decoding speed is told against it. seed picks one of many such samples.
func StandardSample(p []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	words := []string{"kernel ", "module ", "libc.so.6 ", "/usr/share/doc ", "config\n", "0x0000ffff ", "README ", "mount "}
	for i := 0; i < len(p); {
		n := min(len(p)-i, 4096*(1+r.IntN(16)))
		if r.IntN(2) == 0 {
			for j := i; j+8 <= i+n; j += 8 {
				binary.LittleEndian.PutUint64(p[j:], r.Uint64())
			}
		} else {
			for j := i; j < i+n; {
				j += copy(p[j:i+n], words[r.IntN(len(words))])
			}
		}
		i += n
	}
}

// standardSampleSize is the standard sample's size: larger than a core's
// caches, so decoding it costs what a long stream costs.
const standardSampleSize = 2 << 20

// A SampleDecoder decodes the standard sample, compressed with one codec,
// over and over as one endless stream: the way a node decodes a cast, with
// one decoder that stays warm, so the rate it is timed at is a codec's
// steady rate on this machine.
type SampleDecoder struct {
	dec io.ReadCloser
}

// NewSampleDecoder compresses the standard sample with enc and opens a
// decoder on it repeated without end: a node's stream decoder, or with
// checked one that checks the format's checksums, as a scan of a stored
// image does (imaging.NewDecoder).
func NewSampleDecoder(enc imaging.Encoding, checked bool) (*SampleDecoder, error) {
	packed, err := packedSample(enc)
	if err != nil {
		return nil, err
	}
	return newCyclingDecoder(enc, packed, checked)
}

// packedSample is the standard sample compressed with enc.
func packedSample(enc imaging.Encoding) ([]byte, error) {
	if !enc.Compressed() {
		return nil, fmt.Errorf("no decoder for %s", enc)
	}
	sample := make([]byte, standardSampleSize)
	StandardSample(sample, 1)
	var packed bytes.Buffer
	if err := imaging.CompressBytes(&packed, enc, sample); err != nil {
		return nil, fmt.Errorf("compressing the standard sample with %s: %w", enc, err)
	}
	return packed.Bytes(), nil
}

// NewRLESampleDecoder opens a decoder on zeros as zstd's own tool writes
// them, in RLE blocks (imaging.ZstdRLEStream), repeated without end. A
// decoder fills those byte by byte, at a speed of its own that the
// standard sample does not tell: in a stored image of a filesystem they
// are its free space, often most of it.
func NewRLESampleDecoder(checked bool) (*SampleDecoder, error) {
	packed, err := imaging.ZstdRLEStream(standardSampleSize)
	if err != nil {
		return nil, err
	}
	return newCyclingDecoder(imaging.Zstd, packed, checked)
}

// newCyclingDecoder decodes packed, a whole stream, over and over. Both
// codecs read concatenated frames (zstd) or members (gzip) as one stream,
// so a stream repeated is a valid stream of any length.
func newCyclingDecoder(enc imaging.Encoding, packed []byte, checked bool) (*SampleDecoder, error) {
	open := imaging.NewStreamDecoder
	if checked {
		open = imaging.NewDecoder
	}
	dec, err := open(enc, &cycle{b: packed})
	if err != nil {
		return nil, err
	}
	return &SampleDecoder{dec: dec}, nil
}

// Decode fills p with decoded bytes of the sample.
func (s *SampleDecoder) Decode(p []byte) (int, error) {
	return io.ReadFull(s.dec, p)
}

// Close releases the decoder.
func (s *SampleDecoder) Close() error { return s.dec.Close() }

// cycle reads b again and again.
type cycle struct {
	b   []byte
	off int
}

func (c *cycle) Read(p []byte) (int, error) {
	n := copy(p, c.b[c.off:])
	c.off = (c.off + n) % len(c.b)
	return n, nil
}

// A decodeGauge times an image's decoding, piece by piece on one thread,
// and between pieces the standard sample's, so that the two rates are
// measured under the same conditions. What slows the machine while it
// measures (other work, a virtual machine's stolen time, the clock
// speed) slows both alike and drops out of their ratio, the image's
// decoding factor, which a rate timed alone does not: on a shared machine
// that varies by tens of percent from one run to the next.
type decodeGauge struct {
	cpu func() time.Duration
	// share bounds the sample's CPU to 1/share of the image's (0:
	// gaugeShare).
	share  int
	sample sampleSource // nil: the factor is not measured
	spare  []byte
	image  timing
	ref    timing
	// other is a second sample decoder, timed in turn with the first into
	// otherRef, with a buffer of its own (otherSpare): see sampleRate.
	other      sampleSource
	otherSpare []byte
	otherRef   timing
	turn       bool
	// rle decodes zeros in zstd's RLE blocks, timed like the sample, for
	// a zstd image; nil otherwise.
	rle    sampleSource
	rleRef timing
}

// sampleSource is what the gauge needs of a SampleDecoder.
type sampleSource interface {
	Decode(p []byte) (int, error)
	Close() error
}

type timing struct {
	bytes int64
	cpu   time.Duration
}

func (t timing) rate() float64 {
	if t.bytes == 0 || t.cpu <= 0 {
		return 0
	}
	return float64(t.bytes) / t.cpu.Seconds()
}

// sampleWarmup is how much of the sample is decoded, untimed, before each
// timed piece of it.
const sampleWarmup = 256 << 10

// gaugeShare is the most CPU the sample may take against the image's, by
// default: it is decoded between pieces only while it has had less than
// this share, which spreads it evenly over the image's decoding at an
// eighth of its cost.
const gaugeShare = 8

// newDecodeGauge returns a gauge for enc timed by cpu, a thread's clock
// (OnOneThread), that gives the sample at most 1/share of the image's CPU
// (0: gaugeShare). checked says whether the image's decoder checks the
// format's checksums: the sample's does alike, so that the two compare.
// rle also times the RLE sample, for a zstd image that has RLE blocks.
func newDecodeGauge(enc imaging.Encoding, checked, rle bool, share int, cpu func() time.Duration) *decodeGauge {
	g := &decodeGauge{cpu: cpu, share: share}
	if s, err := NewSampleDecoder(enc, checked); err == nil {
		// Its first piece, untimed, pays the decoder's start-up and the
		// buffer's first touch, which few timed pieces would not spread.
		g.spare = make([]byte, 1<<20)
		if _, err := s.Decode(g.spare); err == nil {
			g.sample = s
		} else {
			s.Close()
		}
	}
	if g.sample != nil {
		if s, err := NewSampleDecoder(enc, checked); err == nil {
			// Offset by a few pages from the first's.
			g.otherSpare = make([]byte, 1<<20+5<<12)[5<<12:]
			if _, err := s.Decode(g.otherSpare); err == nil {
				g.other = s
			} else {
				s.Close()
			}
		}
	}
	if g.sample != nil && rle && enc == imaging.Zstd {
		if s, err := NewRLESampleDecoder(checked); err == nil {
			if _, err := s.Decode(g.spare); err == nil {
				g.rle = s
			} else {
				s.Close()
			}
		}
	}
	return g
}

// read reads one piece of the image from dec into p, timing it, and then
// perhaps one piece of the standard sample (and of the RLE sample).
func (g *decodeGauge) read(dec io.Reader, p []byte) (int, error) {
	t := g.cpu()
	n, err := imaging.ReadFull(dec, p)
	g.image.cpu += g.cpu() - t
	g.image.bytes += int64(n)
	// Without a thread clock (both times 0) the factor cannot be told:
	// the sample is not decoded at all.
	share := time.Duration(cmp.Or(g.share, gaugeShare))
	if g.sample != nil && n > 0 && g.image.cpu > 0 && (g.ref.cpu+g.otherRef.cpu)*share <= g.image.cpu {
		ok := true
		if g.turn = !g.turn; g.turn && g.other != nil {
			if !g.time(g.other, &g.otherRef, &g.otherSpare, n) { // the first carries on
				g.other.Close()
				g.other, g.otherRef = nil, timing{}
			}
		} else {
			ok = g.time(g.sample, &g.ref, &g.spare, n)
		}
		if !ok {
			g.close()
		} else if g.rle != nil && !g.time(g.rle, &g.rleRef, &g.spare, n) {
			g.rle.Close()
			g.rle = nil
		}
	}
	return n, err
}

// time decodes n bytes of a sample into t, after an untimed warm-up.
func (g *decodeGauge) time(s sampleSource, t *timing, spare *[]byte, n int) bool {
	if len(*spare) < n {
		*spare = make([]byte, n)
	}
	// Untimed, the warm-up brings the sample decoder's state back into
	// the caches the image's piece took: a node's decoder runs warm, and
	// a cold one timed on a busy machine read the factor several percent
	// high.
	if _, err := s.Decode((*spare)[:min(n, sampleWarmup)]); err != nil {
		return false
	}
	start := g.cpu()
	m, err := s.Decode((*spare)[:n])
	t.cpu += g.cpu() - start
	t.bytes += int64(m)
	return err == nil
}

// rate is the image's decoding rate in raw bytes per CPU second, 0 when
// too little was decoded to tell.
func (g *decodeGauge) rate() float64 { return g.image.rate() }

// sampleRate is the standard sample's decoding rate: the faster of the two
// decoders'. One decoder now and then runs at half the speed of another
// for as long as it lives, on a machine whose nodes' decoders do not (the
// buffers it was given, or its own, fall where they slow each other): in
// 3 of 9 lab joins the first decoder took 860-930 MB/s and a second,
// decoding into a buffer a few pages off, 1330-1650, and the image's
// factor read 1.6-1.8 times too high.
func (g *decodeGauge) sampleRate() float64 {
	return max(g.ref.rate(), g.otherRef.rate())
}

// factor is the image's decoding rate over the standard sample's, 0 when
// unknown.
func (g *decodeGauge) factor() float64 {
	img, ref := g.image.rate(), g.sampleRate()
	if img == 0 || ref == 0 {
		return 0
	}
	return img / ref
}

// rleFactor is the decoding rate of zeros in RLE blocks over the standard
// sample's, 0 when unknown.
func (g *decodeGauge) rleFactor() float64 {
	rle, ref := g.rleRef.rate(), g.sampleRate()
	if rle == 0 || ref == 0 {
		return 0
	}
	return rle / ref
}

func (g *decodeGauge) close() {
	for _, s := range []*sampleSource{&g.sample, &g.other, &g.rle} {
		if *s != nil {
			(*s).Close()
			*s = nil
		}
	}
}
