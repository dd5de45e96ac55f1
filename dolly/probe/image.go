package probe

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"dolly/imaging"
)

// Profile is what the capacity model needs to know of an image.
type Profile struct {
	Encoding   imaging.Encoding // as stored
	Size       int64            // raw bytes
	StreamSize int64            // stored bytes
	// ZeroFraction is the share of the raw image in zero runs, which a
	// cast neither sends nor writes.
	ZeroFraction float64
	// HoleFraction is the share of a raw image that its file keeps as
	// holes (a sparse file), which the source sends as zero runs unread.
	HoleFraction float64
	// Codec and Factor describe the image compressed: the stored codec and
	// its exact factor for a compressed image; for a raw image zstd and the
	// factor estimated from samples, for compressing it on the fly.
	Codec  imaging.Encoding
	Factor float64
	// Sampled says the figures are estimates from samples of a raw image.
	Sampled bool
	// DecodeRate is how many raw bytes of this image one core of this
	// machine decodes per second, as a node will decode its stream (the
	// stored one, or the one compressed on the fly).
	DecodeRate float64
	// DecodeFactor is DecodeRate over the rate of the standard sample
	// (StandardSample), both timed together; 0 when unknown. Decoders'
	// speed depends on the data, so nodes' rates on the sample are scaled
	// by it.
	DecodeFactor float64
	// RLEFraction is the share of a stored zstd image's raw bytes that
	// decode from RLE blocks (imaging.ZstdRLEBytes), and RLEFactor their
	// decoding rate over the standard sample's, timed with the image's.
	// Decoders fill RLE blocks at a speed of their own, which differs from
	// one program to another far more than the rest of their work: a node
	// takes the image's cost with its own figure for them in place of
	// this machine's.
	RLEFraction, RLEFactor float64
	// RLESkipped is the share of the image's raw bytes, among those of
	// RLEFraction, that a node's decoder hands on as zeros without
	// filling them (zeros deep in a run of free space): they cost a node
	// nothing to decode.
	RLESkipped float64
	// WholeFraction is the share of a stored zstd image's raw bytes in
	// frames of a chunk or less (imaging.CountZstd), as dolly captures an
	// image: a node writing with O_DIRECT decodes them whole into the
	// buffers its target writes from, and copies none of them again.
	WholeFraction float64
	// EncodeRate is how many bytes of a raw image's data one core of this
	// machine compresses per second, as the source would on the fly, its
	// zero runs' (small) cost counted with the data's; 0 for a compressed
	// image. Encoders' speed depends on the data as much as decoders'.
	// Image times the encoder alone; TimeCompression, the source's whole
	// compressing path, which is what a cast pays.
	EncodeRate float64
	// Pieces are the image stretch by stretch, in order, with the same
	// figures each; nil when not measured.
	Pieces []Piece

	samples []sample // what Image read of a raw image, for TimeCompression
}

// sample is a stretch of a raw image that Image read, and how much of it
// was zero runs.
type sample struct {
	off, len, zero int64
}

// profileSamples is how many evenly spread stretches of a raw image
// Profile samples, and profileData the data (bytes not in holes) it reads
// of each at least, in whole chunks as a cast compresses them
// (imaging.ChunkSize): 256 MiB of data at most when it is dense, under a
// second, and an image of up to profileSamples chunks whole. A sample
// compressed in smaller pieces than a cast's chunks compresses worse: the
// bench's 1 GiB ext4 image gave 10.26 read in pieces of 1 MiB, and 10.96
// cast in chunks of 2 MiB (its zstd casts on 100 Mbit/s links ran 10-14%
// faster than their previews). Fewer samples saw too little of a file system whose files
// compress each its own way: 64 of 1 MiB put the same image anywhere from
// 9.7 to 13.0 as the samples' places moved within their stretches.
const (
	profileSamples = 128
	profileData    = imaging.ChunkSize / 2
	// profileChunks bounds the chunks read of one stretch, which may hold
	// little data in many chunks between holes.
	profileChunks = 4
)

// Image describes im for planning. A compressed image is scanned
// (imaging.Image.Scan, which learns its size and digest) while one core's
// decoding of it is timed; progress, if set, is told of the scan's raw
// bytes. A raw image is sampled (the whole of it when small).
func Image(ctx context.Context, im *imaging.Image, progress func(raw int64)) (Profile, error) {
	if im.Encoding.Compressed() {
		return scan(ctx, im, progress)
	}
	return sampleImage(ctx, im, profileSamples)
}

// sampleImage profiles a raw image from a sample of each of n stretches.
//
// A stretch is whole chunks of the cast (imaging.ChunkSize), and its
// sample the chunks that hold data from a place of its own in the stretch
// (samplePlace) on, read whole and compressed as a cast compresses them.
// Holes are zero runs known exactly, where samples only estimate: each
// stretch counts its own, and what its sample says of the data (the bytes
// not in holes) stands for the stretch's data (readings.stands).
func sampleImage(ctx context.Context, im *imaging.Image, n int) (Profile, error) {
	p := Profile{Encoding: im.Encoding, Size: im.Size, StreamSize: im.StreamSize}
	p.Sampled, p.Codec = true, imaging.Zstd
	if im.Size <= 0 {
		return p, nil
	}
	// The holes are held in memory: at most maxHoleWalk of them (16 MiB),
	// past which a file counts as having none.
	var holes holeMap
	if !im.HoleRuns(ctx, func(off, end int64) { holes = append(holes, span{off, end}) }) {
		holes = nil
	}
	const chunk = imaging.ChunkSize
	buf := make([]byte, chunk)
	// At most n stretches: an image of more chunks is sampled.
	step := max((im.Size/int64(n)+chunk-1)/chunk*chunk, chunk)
	var packed []byte
	var parts []tallyPart
	var scales []float64 // how many times its reads' decoding time each part's is
	var sizes []int      // each read's raw bytes, in order, for decodeRate
	var partOf []int     // the part each read is of
	var failed error
	// One encoder on one thread, timed by the thread's own clock: other
	// work on the machine, such as nodes probing as they join, does not
	// count.
	OnOneThread(func(clock func() time.Duration) {
		var encoding time.Duration
		ce, err := imaging.NewChunkEncoder(imaging.Zstd, imaging.OnTheFly)
		if err != nil {
			failed = err
			return
		}
		for start := int64(0); start < im.Size; start += step {
			if err := ctx.Err(); err != nil {
				failed = err
				return
			}
			end := min(start+step, im.Size)
			chunks := (end - start + chunk - 1) / chunk
			// From the sample's chunk to the stretch's end, and on from its
			// start: every chunk of the stretch is as likely to be read.
			first := (samplePlace(start, end, len(parts)) - start) / chunk
			var got readings
			for k, reads := int64(0), 0; k < chunks && reads < profileChunks && got.raw < profileData; k++ {
				off := start + (first+k)%chunks*chunk
				stop := min(off+chunk, end)
				inHoles := holes.in(off, stop)
				if inHoles == stop-off {
					continue
				}
				read, err := im.ReadAt(buf[:stop-off], off)
				if err != nil && err != io.EOF {
					failed = fmt.Errorf("image %s: reading at %d: %w", im.Path, off, err)
					return
				}
				reads++
				eof := off+int64(read) == im.Size
				var zero int64
				imaging.Segments(buf[:read], off, imaging.MinZeroRun, eof, func(s imaging.Segment) {
					if s.Zero {
						zero += int64(s.Len)
					}
				})
				before := len(packed)
				t := clock()
				packed, err = ce.Encode(packed, buf[:read], off, eof)
				encoding += clock() - t
				if err != nil {
					failed = err
					return
				}
				inHoles = min(inHoles, int64(read))
				got.raw += int64(read) - inHoles
				got.zero += max(0, zero-inHoles)
				got.packed += int64(len(packed) - before)
				p.samples = append(p.samples, sample{off: off, len: int64(read), zero: zero})
				sizes, partOf = append(sizes, read), append(partOf, len(parts))
				if int64(read) < stop-off {
					break // the image ended early
				}
			}
			part, scale := got.stands(end-start, holes.in(start, end))
			parts, scales = append(parts, part), append(scales, scale)
		}
		var data int64
		for _, s := range p.samples {
			data += s.len - s.zero
		}
		if encoding > 0 && data > 0 {
			p.EncodeRate = float64(data) / encoding.Seconds()
		}
	})
	if failed != nil {
		return p, failed
	}
	var size, zeros, stored int64
	for _, part := range parts {
		size, zeros, stored = size+part.raw, zeros+part.zero, stored+part.packed
	}
	p.ZeroFraction = float64(zeros) / float64(size)
	if holes != nil {
		p.HoleFraction = float64(holes.in(0, im.Size)) / float64(im.Size)
	}
	p.Factor = float64(size) / float64(max(stored, 1))
	var cpu []time.Duration
	p.DecodeRate, p.DecodeFactor, cpu = decodeRate(imaging.Zstd, packed, sizes)
	var decoding time.Duration
	for j, c := range cpu {
		i := partOf[j]
		c = time.Duration(float64(c) * scales[i])
		parts[i].cpu += c
		decoding += c
	}
	// The reads were of data; the image's rate counts its holes too,
	// which no node decodes.
	if decoding > 0 && p.DecodeRate > 0 {
		rate := float64(size) / decoding.Seconds()
		p.DecodeFactor *= rate / p.DecodeRate
		p.DecodeRate = rate
	}
	p.Pieces = mergePieces(parts)
	return p, nil
}

// readings is what the reads of a stretch's sample found: raw bytes, of
// them in zero runs, and compressed.
type readings struct{ raw, zero, packed int64 }

// stands returns what got, read from a stretch's data, stands for in the
// stretch of size bytes, of which holes are holes: its figures as if read
// whole, and how many times the reads' decoding time the stretch's is.
func (got readings) stands(size, holes int64) (tallyPart, float64) {
	part := tallyPart{size: size, raw: size, zero: holes}
	if got.raw <= 0 {
		return part, 0
	}
	scale := float64(size-holes) / float64(got.raw)
	part.zero = min(size, holes+int64(float64(got.zero)*scale))
	part.packed = int64(float64(got.packed) * scale)
	return part, scale
}

// samplePlace is where the sample of the i-th stretch [start, end) is
// read from (on to the end, then on from the start): each at another
// place within its stretch, spread evenly over all the places in turn. A sample at the same place of every stretch
// sees the same place of a pattern that repeats with the stretch (data
// and zeros in turn), and takes every stretch for all data or all zeros.
func samplePlace(start, end int64, i int) int64 {
	room := end - start
	if room <= imaging.ChunkSize {
		return start
	}
	const golden = 0.6180339887498949 // the most even of such sequences
	_, frac := math.Modf(float64(i+1) * golden)
	off := start + int64(frac*float64(room))
	return off - off%imaging.ZeroBlock
}

// span is a stretch [off, end) of an image.
type span struct{ off, end int64 }

// holeMap is an image's holes, in order; nil when they are not known.
type holeMap []span

// in is how many bytes of [from, to) are holes.
func (h holeMap) in(from, to int64) int64 {
	var n int64
	for i := h.first(from); i < len(h) && h[i].off < to; i++ {
		n += max(0, min(h[i].end, to)-max(h[i].off, from))
	}
	return n
}

// dataFrom is the first offset from off on that is not in a hole.
func (h holeMap) dataFrom(off int64) int64 {
	for i := h.first(off); i < len(h) && h[i].off <= off; i++ {
		off = h[i].end
	}
	return off
}

// holeFrom is where the first hole from off on starts; math.MaxInt64
// when none does.
func (h holeMap) holeFrom(off int64) int64 {
	if i := h.first(off); i < len(h) {
		return max(h[i].off, off)
	}
	return math.MaxInt64
}

// first is the index of the first hole that ends after off.
func (h holeMap) first(off int64) int {
	i, _ := slices.BinarySearchFunc(h, off, func(s span, off int64) int {
		if s.end <= off {
			return -1
		}
		return 1
	})
	return i
}

// scan scans a compressed image on one thread, timing its decoding and,
// between pieces, the standard sample's, and tallying its stretches.
func scan(ctx context.Context, im *imaging.Image, progress func(raw int64)) (Profile, error) {
	// The frames' headers tell the RLE blocks' share before the scan; a
	// stream whose headers cannot be walked fails the scan itself, or its
	// decoding is timed as a whole.
	counts, rerr := im.ZstdCounts()
	if rerr != nil {
		counts = imaging.ZstdCounts{}
	}
	rle, skipped := counts.RLE, counts.Skipped
	var err error
	w := &scanWatch{tally: pieceTally{span: tallySpan}}
	OnOneThread(func(cpu func() time.Duration) {
		w.gauge = newDecodeGauge(im.Encoding, true, rle > 0, gaugeShare, cpu)
		defer w.gauge.close()
		// The decoder runs in this goroutine, so the thread's CPU time
		// around it is the decoding's.
		err = im.Scan(ctx, progress, w)
	})
	if err != nil {
		return Profile{}, err
	}
	// The scan fills the zeros a node's decoder skips: its stretches'
	// times would put on the free space a cost no node pays.
	if rate := w.gauge.rleRef.rate(); rate > 0 {
		w.tally.discountSkipped(skipped, 1/rate)
	}
	p := Profile{
		Encoding: im.Encoding, Size: im.Size, StreamSize: im.StreamSize,
		ZeroFraction: float64(im.ZeroBytes) / float64(im.Size),
		Codec:        im.Encoding, Factor: float64(im.Size) / float64(im.StreamSize),
		DecodeRate: w.gauge.rate(), DecodeFactor: w.gauge.factor(),
		Pieces: mergePieces(w.tally.parts),
	}
	if counts.Whole > 0 && im.Size > 0 {
		p.WholeFraction = min(float64(counts.Whole)/float64(im.Size), 1)
	}
	if f := w.gauge.rleFactor(); f > 0 && rle > 0 && rle <= im.Size {
		p.RLEFraction, p.RLEFactor = float64(rle)/float64(im.Size), f
		p.RLESkipped = float64(skipped) / float64(im.Size)
	}
	return p, nil
}

// scanWatch times a scan's reads and tallies its stretches.
type scanWatch struct {
	gauge   *decodeGauge
	tally   pieceTally
	lastCPU time.Duration // the image's decoding time before the last read
}

func (w *scanWatch) Read(dec io.Reader, p []byte) (int, error) {
	w.lastCPU = w.gauge.image.cpu
	return w.gauge.read(dec, p)
}

func (w *scanWatch) Decoded(off, raw, zero, packed int64) {
	w.tally.add(off, raw, zero, packed, w.gauge.image.cpu-w.lastCPU)
}

// tallySpan is the stretch a scan or a profile measures on its own before
// the stretches are merged into pieces.
const tallySpan = 8 << 20

// A raw image's samples, mostly zero runs, may decode in 10-16 ms, and an
// eighth of that is one or two pieces of the standard sample, too few to
// time: one image's factor read from 2.4 to 8.6. So the samples are decoded
// over and over until they have taken profileDecodeCPU, and the standard
// sample is timed for up to half as long (profileGaugeShare).
// profileDecodePasses bounds the passes over samples that cost next to
// nothing (an image nearly all zeros).
const (
	profileDecodeCPU    = 80 * time.Millisecond
	profileDecodePasses = 32
	profileGaugeShare   = 2
)

// decodeRate times one core decoding a compressed stream held in memory,
// over as many passes as profileDecodeCPU takes, and returns its rate,
// its factor against the standard sample and the time each of the
// stream's parts took in one pass, the parts being the sizes given in raw
// bytes, in order.
func decodeRate(enc imaging.Encoding, stream []byte, sizes []int) (rate, factor float64, cpu []time.Duration) {
	if len(stream) == 0 || len(sizes) == 0 {
		return 0, 0, nil // nothing to cycle through
	}
	OnOneThread(func(clock func() time.Duration) {
		d, err := newCyclingDecoder(enc, stream, false)
		if err != nil {
			return
		}
		defer d.Close()
		gauge := newDecodeGauge(enc, false, false, profileGaugeShare, clock)
		defer gauge.close()
		if parts, ok := decodePasses(gauge, d.dec, sizes); ok {
			rate, factor, cpu = gauge.rate(), gauge.factor(), parts
		}
	})
	return rate, factor, cpu
}

// decodePasses reads the parts of sizes through g from dec, a stream
// repeated without end, pass after pass until the image has taken
// profileDecodeCPU (or profileDecodePasses are done; one pass without a
// thread clock, whose times are all 0), and returns the time each part
// took in one pass, on average.
func decodePasses(g *decodeGauge, dec io.Reader, sizes []int) ([]time.Duration, bool) {
	buf := make([]byte, 1<<20)
	parts := make([]time.Duration, len(sizes))
	passes := 0
	for passes < profileDecodePasses && (passes == 0 || g.image.cpu > 0 && g.image.cpu < profileDecodeCPU) {
		for i, size := range sizes {
			before := g.image.cpu
			for size > 0 {
				n, err := g.read(dec, buf[:min(size, len(buf))])
				size -= n
				if n == 0 || err != nil {
					return nil, false
				}
			}
			parts[i] += g.image.cpu - before
		}
		passes++
	}
	for i := range parts {
		parts[i] /= time.Duration(passes)
	}
	return parts, true
}
