package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"dolly/dolly/stream"
	"dolly/imaging"
)

// compressBudget bounds TimeCompression's CPU time: enough samples to
// stand for the image, and no more of the start-up than the probes take.
const compressBudget = 300 * time.Millisecond

// TimeCompression times the source's whole compressing path over the
// samples Image read of a raw image, and sets p.EncodeRate from it. The
// encoder timed alone leaves out what the cast pays around it: the
// image's reads, the digest, the hand-off of compressed blocks to the
// framing, the frames' checks and the wake-ups of its goroutines (reader, compressors, framer): a fifth
// to a third more CPU a byte on the bench's image, alone, and more in a
// cast. So the path runs here as the cast runs it (stream's
// on-the-fly encoder, fed the samples), and the process's CPU time is what
// it cost. Call it before the process does other work: that would count.
func TimeCompression(ctx context.Context, im *imaging.Image, p *Profile, codec imaging.Encoding, frameSize int) error {
	if len(p.samples) == 0 || !codec.Compressed() {
		return nil
	}
	src := &sampleReader{ctx: ctx, im: im, samples: p.samples, start: ProcessCPU()}
	// The size is the image's: the budget may end the samples early, and
	// the stream is only timed.
	e, err := stream.NewCompressingEncoder(src, im.Size, frameSize, codec)
	if err != nil {
		return err
	}
	defer e.Close()
	start := src.start
	for {
		_, err := e.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("timing compression of %s: %w", im.Path, err)
		}
	}
	cpu := ProcessCPU() - start
	if data := src.read - src.zero; cpu > 0 && data > 0 {
		p.EncodeRate = float64(data) / cpu.Seconds()
	}
	return nil
}

// sampleReader yields the samples one after the other, whole, until the
// CPU budget is spent, and counts what it yielded.
type sampleReader struct {
	ctx        context.Context
	im         *imaging.Image
	samples    []sample
	start      time.Duration // the process's CPU time when timing began
	pos        int64         // within samples[0]
	read, zero int64
}

func (r *sampleReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if len(r.samples) == 0 {
		return 0, io.EOF
	}
	s := r.samples[0]
	if r.pos == 0 && r.read > 0 && ProcessCPU()-r.start > compressBudget {
		r.samples = nil
		return 0, io.EOF
	}
	n, err := r.im.ReadAt(b[:min(int64(len(b)), s.len-r.pos)], s.off+r.pos)
	r.pos += int64(n)
	if r.pos == s.len {
		r.read, r.zero = r.read+s.len, r.zero+s.zero
		r.samples, r.pos = r.samples[1:], 0
	} else if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}
