package imaging

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// Profile is what the capacity model needs to know of an image.
type Profile struct {
	Encoding   Encoding // as stored
	Size       int64    // raw bytes
	StreamSize int64    // stored bytes
	// ZeroFraction is the share of the raw image in zero runs, which a
	// cast neither sends nor writes.
	ZeroFraction float64
	// Codec and Factor describe the image compressed: the stored codec and
	// its exact factor for a compressed image; for a raw image zstd and the
	// factor estimated from samples, for compressing it on the fly.
	Codec  Encoding
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
	// Pieces are the image stretch by stretch, in order, with the same
	// figures each; nil when not measured.
	Pieces []Piece
}

// profileSamples is how many evenly spread pieces of a raw image Profile
// reads, each profileSample bytes: about 64 MiB, a fraction of a second.
const (
	profileSamples = 64
	profileSample  = 1 << 20
)

// Profile describes the image for planning. A compressed image must have
// been scanned; a raw one is sampled (the whole of it when small).
func (im *Image) Profile(ctx context.Context) (Profile, error) {
	p := Profile{Encoding: im.Encoding, Size: im.Size, StreamSize: im.StreamSize}
	if im.Encoding.Compressed() {
		if im.Digest.IsZero() {
			return p, fmt.Errorf("image %s must be scanned before it is profiled", im.Path)
		}
		p.ZeroFraction = float64(im.ZeroBytes) / float64(im.Size)
		p.Codec, p.Factor = im.Encoding, float64(im.Size)/float64(im.StreamSize)
		p.DecodeRate, p.DecodeFactor = im.decodeRate, im.decodeFactor
		p.Pieces = im.pieces
		return p, nil
	}
	p.Sampled, p.Codec = true, Zstd
	buf := make([]byte, profileSample)
	step := max(im.Size/profileSamples/ZeroBlock*ZeroBlock, profileSample)
	var packed bytes.Buffer
	zw, err := NewEncoder(Zstd, &packed, 1)
	if err != nil {
		return p, err
	}
	reset, _ := zw.(interface{ Reset(io.Writer) })
	// Each sample is a frame of its own, so that each piece's factor is
	// its own data's.
	var parts []tallyPart
	var sizes []int
	for off := int64(0); off < im.Size; off += step {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		n, err := im.f.ReadAt(buf[:min(int64(len(buf)), im.Size-off)], off)
		if err != nil && err != io.EOF {
			return p, fmt.Errorf("image %s: reading at %d: %w", im.Path, off, err)
		}
		part := tallyPart{size: min(step, im.Size-off), raw: int64(n)}
		Segments(buf[:n], off, MinZeroRun, off+int64(n) == im.Size, func(s Segment) {
			if s.Zero {
				part.zero += int64(s.Len)
			}
		})
		before := packed.Len()
		if _, err := zw.Write(buf[:n]); err != nil {
			return p, err
		}
		if reset != nil {
			if err := zw.Close(); err != nil {
				return p, err
			}
			reset.Reset(&packed)
		}
		part.packed = int64(packed.Len() - before)
		parts, sizes = append(parts, part), append(sizes, n)
	}
	if err := zw.Close(); err != nil {
		return p, err
	}
	var sampled, zeros int64
	for _, part := range parts {
		sampled, zeros = sampled+part.raw, zeros+part.zero
	}
	p.ZeroFraction = float64(zeros) / float64(sampled)
	p.Factor = float64(sampled) / float64(max(packed.Len(), 1))
	var cpu []time.Duration
	p.DecodeRate, p.DecodeFactor, cpu = decodeRate(Zstd, packed.Bytes(), sizes)
	if reset != nil { // otherwise one stream: the parts' sizes are not their own
		for i := range cpu {
			parts[i].cpu = cpu[i]
		}
		p.Pieces = mergePieces(parts)
	}
	return p, nil
}

// decodeRate times one core decoding a compressed stream held in memory,
// and returns its rate, its factor against the standard sample and the
// time each of the stream's parts took, the parts being the sizes given in
// raw bytes, in order.
func decodeRate(enc Encoding, stream []byte, sizes []int) (rate, factor float64, cpu []time.Duration) {
	OnOneThread(func(clock func() time.Duration) {
		d, err := NewDecoder(enc, bytes.NewReader(stream))
		if err != nil {
			return
		}
		defer d.Close()
		gauge := newDecodeGauge(enc, clock)
		defer gauge.close()
		buf := make([]byte, 1<<20)
		for _, size := range sizes {
			before := gauge.image.cpu
			for size > 0 {
				n, err := gauge.read(d, buf[:min(size, len(buf))])
				size -= n
				if n == 0 || err != nil && (err != io.EOF || size > 0) {
					return
				}
			}
			cpu = append(cpu, gauge.image.cpu-before)
		}
		rate, factor = gauge.rate(), gauge.factor()
	})
	if len(cpu) < len(sizes) {
		cpu = nil
	}
	return rate, factor, cpu
}
