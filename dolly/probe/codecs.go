package probe

// The codec probes: how fast this machine decodes the standard sample
// (zstd, gzip, zstd's RLE blocks) and compresses it, on one core.

import (
	"bytes"
	"io"
	"runtime"
	"time"

	"dolly/imaging"
)

// probeDecompress measures dolly's own decoder on the standard sample,
// decoded as one long stream, as a node decodes a cast.
func probeDecompress(enc imaging.Encoding, budget time.Duration) (float64, error) {
	s, err := NewSampleDecoder(enc, false)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	buf := make([]byte, 1<<20)
	var failed error
	rate := measure(budget, func() int {
		n, err := s.Decode(buf)
		if err != nil {
			failed = err
			return max(n, 1)
		}
		return n
	})
	return rate, failed
}

// probeZstdDecode measures dolly's own zstd decoder on the standard sample
// and filling RLE blocks, a piece of each in turn: what an image costs a
// node is told from the ratio of the two (see server.ImageDecode), and
// whatever else slows the machine while it measures slows both alike.
//
// The sample is decoded by two decoders in turn, each into its own view of
// one buffer (a few pages apart), and the rate is both together's: their
// bytes over their CPU time. A decoder runs at one of two speeds, half of
// one another, for as long as it lives, as the memory it was given falls
// (on the lab's VM; one made after another was collected reuses its
// memory, and its speed). Timed
// with one decoder, the sample read 830-1080 MB/s at 11 of 25 joins of
// labs of 4 and 24 nodes and 1510-2140 at the others, and the preview of
// one cast of 24 swung from 72 to 116 MB/s against 86-97 measured. Of two
// decoders, one was slow at 7 of 8 joins; the previews of six came to
// 100-104 against 93-99, the cast's nodes, whose decoders are slow and
// fast alike, costing the machine what the model counted within 5%.
func probeZstdDecode(budget time.Duration) (sample, rle float64, err error) {
	b, err := newZstdBench()
	if err != nil {
		return 0, 0, err
	}
	defer b.close()
	OnOneThread(func(cpu func() time.Duration) {
		if cpu() == 0 { // no thread clock here: the wall's
			t0 := time.Now()
			cpu = func() time.Duration { return time.Since(t0) }
		}
		var t zstdTimings
		for start := time.Now(); time.Since(start) < budget || !t.both(); {
			if err = b.round(cpu, &t); err != nil {
				return
			}
		}
		sample, rle = t.sample().rate(), t.rle.rate()
	})
	return sample, rle, err
}

// zstdBench is probeZstdDecode's decoders: two on the standard sample,
// each into its own view of one buffer, and one filling RLE blocks.
type zstdBench struct {
	samples [2]*SampleDecoder
	rle     *SampleDecoder
	bufs    [2][]byte
}

// newZstdBench sets a zstdBench up, each decoder warmed by a first piece.
func newZstdBench() (*zstdBench, error) {
	// One compressed sample serves both decoders: compressing it twice
	// would take twice the encoder's memory.
	packed, err := packedSample(imaging.Zstd)
	if err != nil {
		return nil, err
	}
	// The encoder's memory is collected before the decoders take theirs:
	// a node's memory is bounded, and the two decoders are its probe's
	// peak.
	runtime.GC()
	b := &zstdBench{}
	for i := range b.samples {
		if b.samples[i], err = newCyclingDecoder(imaging.Zstd, packed, false); err != nil {
			b.close()
			return nil, err
		}
	}
	if b.rle, err = NewRLESampleDecoder(false); err != nil {
		b.close()
		return nil, err
	}
	// One buffer, the second decoder's view of it a few pages off the
	// first's.
	buf := make([]byte, 1<<20+5<<12)
	b.bufs = [2][]byte{buf[:1<<20], buf[5<<12:]}
	// The first piece of each, untimed, pays for the decoders' buffers.
	for i, d := range []*SampleDecoder{b.samples[0], b.samples[1], b.rle} {
		if _, err := d.Decode(b.bufs[min(i, 1)]); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

// zstdTimings are what a zstdBench's decoders decoded, and the time each
// took by the clock it was given.
type zstdTimings struct {
	samples [2]timing
	rle     timing
}

// both says whether both sample decoders have decoded something.
func (t zstdTimings) both() bool { return t.samples[0].bytes > 0 && t.samples[1].bytes > 0 }

// sample is both sample decoders' together: their bytes over their time.
func (t zstdTimings) sample() timing {
	return timing{bytes: t.samples[0].bytes + t.samples[1].bytes, cpu: t.samples[0].cpu + t.samples[1].cpu}
}

// round decodes a piece of the sample and of RLE blocks with each view in
// turn, adding each piece's bytes and time by cpu to t.
func (b *zstdBench) round(cpu func() time.Duration, t *zstdTimings) error {
	pieces := []struct {
		d   *SampleDecoder
		t   *timing
		buf []byte
	}{{b.samples[0], &t.samples[0], b.bufs[0]}, {b.rle, &t.rle, b.bufs[0]}, {b.samples[1], &t.samples[1], b.bufs[1]}, {b.rle, &t.rle, b.bufs[1]}}
	for _, p := range pieces {
		c := cpu()
		n, err := p.d.Decode(p.buf)
		p.t.cpu += cpu() - c
		p.t.bytes += int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *zstdBench) close() {
	for _, d := range []*SampleDecoder{b.samples[0], b.samples[1], b.rle} {
		if d != nil {
			d.Close()
		}
	}
}

// probeCompress measures on-the-fly zstd compression on one core.
func probeCompress(sample []byte, budget time.Duration) (float64, error) {
	var failed error
	rate := measure(budget, func() int {
		if err := imaging.Compress(io.Discard, imaging.Zstd, bytes.NewReader(sample), 1); err != nil {
			failed = err
		}
		return len(sample)
	})
	return rate, failed
}
