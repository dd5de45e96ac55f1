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
		return p, nil
	}
	p.Sampled, p.Codec = true, Zstd
	buf := make([]byte, profileSample)
	step := max(im.Size/profileSamples/ZeroBlock*ZeroBlock, profileSample)
	var sampled, zeros int64
	var packed bytes.Buffer
	zw, err := NewEncoder(Zstd, &packed, 1)
	if err != nil {
		return p, err
	}
	for off := int64(0); off < im.Size; off += step {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		n, err := im.f.ReadAt(buf[:min(int64(len(buf)), im.Size-off)], off)
		if err != nil && err != io.EOF {
			return p, fmt.Errorf("image %s: reading at %d: %w", im.Path, off, err)
		}
		Segments(buf[:n], off, MinZeroRun, off+int64(n) == im.Size, func(s Segment) {
			if s.Zero {
				zeros += int64(s.Len)
			}
		})
		if _, err := zw.Write(buf[:n]); err != nil {
			return p, err
		}
		sampled += int64(n)
	}
	if err := zw.Close(); err != nil {
		return p, err
	}
	p.ZeroFraction = float64(zeros) / float64(sampled)
	p.Factor = float64(sampled) / float64(max(packed.Len(), 1))
	p.DecodeRate, p.DecodeFactor = decodeRate(Zstd, packed.Bytes())
	return p, nil
}

// decodeRate times one core decoding a compressed stream held in memory,
// and returns its rate and its factor against the standard sample.
func decodeRate(enc Encoding, stream []byte) (rate, factor float64) {
	OnOneThread(func(cpu func() time.Duration) {
		d, err := NewDecoder(enc, bytes.NewReader(stream))
		if err != nil {
			return
		}
		defer d.Close()
		gauge := newDecodeGauge(enc, cpu)
		defer gauge.close()
		buf := make([]byte, 1<<20)
		for {
			_, err := gauge.read(d, buf)
			if err == io.EOF {
				rate, factor = gauge.rate(), gauge.factor()
				return
			}
			if err != nil {
				return
			}
		}
	})
	return rate, factor
}
