package probe

import (
	"context"
	"fmt"
	"io"
	"time"

	"dolly/imaging"
)

// An EncodeCrowd times the source's encoder twice on the same pieces of
// a raw image: alone, while the server is the machine's only worker, and
// again while the nodes that share the machine decode at once (the
// decoders' crowd), the way the source compresses a cast among them. The
// whole compressing path is timed alone (TimeCompression); the ratio of
// the two timings of the encoder is what the crowd costs it.
type EncodeCrowd struct {
	enc    *imaging.ChunkEncoder
	pieces [][]byte // of chunks of the image, encodeCrowdPiece each
	offs   []int64
	alone  []time.Duration // each piece's encoding alone, by the thread's clock
	out    []byte
}

// encodeCrowdChunks is how many chunks of the image an EncodeCrowd holds
// (16 MiB): more than its window encodes, spread over the image, as the
// samples are, since encoders' speed depends on the data.
const encodeCrowdChunks = 8

// encodeCrowdPiece is what the encoder compresses at a time, timed: on a
// crowded core a whole chunk took a third of the decoders' window of 60 ms
// and more, and fewer than two fit in it whole in one join of ten. A
// piece's tables are smaller than a chunk's and may feel the crowd less:
// whole chunks read 1.12-1.31 over those joins, pieces 0.94-1.65 over ten
// others.
const encodeCrowdPiece = 256 << 10

// NewEncodeCrowd reads chunks of the samples p's Image read of im and
// times the encoder on each piece of them alone, by its thread's clock,
// after one pass that sets the encoder and its output up: the crowd's
// window must not pay for fresh memory the cast's encoder reuses. It returns nil without
// an error where there is nothing to time (a compressed image, no thread
// clock).
func NewEncodeCrowd(ctx context.Context, im *imaging.Image, p *Profile) (*EncodeCrowd, error) {
	if len(p.samples) == 0 || im.Encoding.Compressed() {
		return nil, nil
	}
	enc, err := imaging.NewChunkEncoder(imaging.Zstd, imaging.OnTheFly)
	if err != nil {
		return nil, err
	}
	c := &EncodeCrowd{enc: enc}
	stride := max(1, len(p.samples)/encodeCrowdChunks)
	for i, read := 0, 0; i < len(p.samples) && read < encodeCrowdChunks; i += stride {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s := p.samples[i]
		if s.len-s.zero < s.len/2 {
			continue // mostly zero runs: next to nothing to encode
		}
		buf := make([]byte, s.len)
		n, err := im.ReadAt(buf, s.off)
		read++
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("image %s: reading at %d: %w", im.Path, s.off, err)
		}
		for at := 0; at < n; at += encodeCrowdPiece {
			c.pieces = append(c.pieces, buf[at:min(at+encodeCrowdPiece, n)])
			c.offs = append(c.offs, s.off+int64(at))
		}
	}
	if len(c.pieces) == 0 {
		return nil, nil
	}
	c.alone = make([]time.Duration, len(c.pieces))
	OnOneThread(func(clock func() time.Duration) {
		if clock() == 0 {
			err = errNoThreadClock
			return
		}
		for pass := range 2 {
			for i := range c.pieces {
				t := clock()
				if err = c.encode(i); err != nil {
					return
				}
				if pass == 1 {
					c.alone[i] = clock() - t
				}
			}
		}
	})
	if err == errNoThreadClock {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// encodeCrowdLeast is the fewest pieces a window must encode whole to
// count: one piece is one moment of the machine.
const encodeCrowdLeast = 2

// encode compresses piece i into the reused output.
func (c *EncodeCrowd) encode(i int) error {
	var err error
	c.out, err = c.enc.Encode(c.out[:0], c.pieces[i], c.offs[i], false)
	return err
}

// PushFor encodes the pieces in turn, over and over, from settle on for
// window, as the decoders' crowd decodes, and returns how many times its
// CPU time alone the encoder took for the pieces it encoded whole in the
// window (0 if fewer than encodeCrowdLeast).
func (c *EncodeCrowd) PushFor(settle, window time.Duration) (float64, error) {
	var crowd, alone time.Duration
	var counted int
	var err error
	OnOneThread(func(clock func() time.Duration) {
		start := time.Now()
		for i := 0; ; i = (i + 1) % len(c.pieces) {
			now := time.Now()
			if now.Sub(start) >= settle+window {
				return
			}
			counts := now.Sub(start) >= settle
			t := clock()
			if err = c.encode(i); err != nil {
				return
			}
			if counts && time.Since(start) <= settle+window {
				crowd += clock() - t
				alone += c.alone[i]
				counted++
			}
		}
	})
	if err != nil || counted < encodeCrowdLeast || crowd <= 0 {
		return 0, err
	}
	return crowd.Seconds() / alone.Seconds(), nil
}
