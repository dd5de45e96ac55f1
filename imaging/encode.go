package imaging

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// NewEncoder returns a writer that compresses what is written to it as enc
// into w, on up to concurrency cores (0: all). Close flushes the end of the
// stream; it does not close w. zstd uses its fastest level, which is what
// compressing an image on the fly during a cast can afford.
func NewEncoder(enc Encoding, w io.Writer, concurrency int) (io.WriteCloser, error) {
	if concurrency <= 0 {
		concurrency = runtime.GOMAXPROCS(0)
	}
	switch enc {
	case Zstd:
		e, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(concurrency))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return e, nil
	case Gzip:
		e, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return e, nil
	}
	return nil, fmt.Errorf("cannot compress as %v", enc)
}

// Compress writes r compressed as enc to w.
func Compress(w io.Writer, enc Encoding, r io.Reader, concurrency int) error {
	e, err := NewEncoder(enc, w, concurrency)
	if err != nil {
		return err
	}
	if _, err := io.Copy(e, r); err != nil {
		e.Close()
		return err
	}
	return e.Close()
}

// CompressBytes writes b compressed as enc to w, as Compress does, but
// with zstd's window the smallest power of two that holds b rather than
// the level's default. The blocks are the same bytes (no match reaches
// past the start of b either way); only the frame header differs, and a
// decoder of the stream holds a window no larger than b.
func CompressBytes(w io.Writer, enc Encoding, b []byte) error {
	if enc != Zstd {
		return Compress(w, enc, bytes.NewReader(b), 1)
	}
	window := zstd.MinWindowSize
	for window < len(b) && window < zstd.MaxWindowSize {
		window *= 2
	}
	e, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(window))
	if err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	if _, err := e.Write(b); err != nil {
		e.Close()
		return fmt.Errorf("zstd: %w", err)
	}
	return e.Close()
}

// ChunkSize is how much of an image ChunkEncoder compresses apart: large
// enough that the format's per-frame cost and the lost matches across
// chunks are nothing, small enough that a few chunks in flight on every
// core hold little memory.
const ChunkSize = 2 << 20

// Level is how hard a ChunkEncoder compresses.
type Level int

const (
	// OnTheFly is the fastest level: what a source that compresses an
	// image during a cast can afford.
	OnTheFly Level = iota
	// Stored is the formats' default level (zstd's 3, as its own tool
	// uses): for an image compressed once and cast many times, at about
	// the same cost to decode.
	Stored
)

// ChunkEncoder compresses chunks of an image, each into a stream of its
// own (a zstd frame, a gzip member). Decoders read such streams one after
// another as one stream, so chunks compress apart, on as many cores as
// there are, and the bytes do not depend on how many there were.
type ChunkEncoder struct {
	z   *zstd.Encoder
	gz  *gzip.Writer
	out bytes.Buffer
}

// NewChunkEncoder returns a ChunkEncoder for enc at level. One serves one
// goroutine.
func NewChunkEncoder(enc Encoding, level Level) (*ChunkEncoder, error) {
	c := &ChunkEncoder{}
	zlevel, gzlevel := zstd.SpeedFastest, gzip.BestSpeed
	if level == Stored {
		zlevel, gzlevel = zstd.SpeedDefault, gzip.DefaultCompression
	}
	switch enc {
	case Zstd:
		z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zlevel), zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		c.z = z
	case Gzip:
		gz, err := gzip.NewWriterLevel(&c.out, gzlevel)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		c.gz = gz
	default:
		return nil, fmt.Errorf("cannot compress as %v", enc)
	}
	return c, nil
}

// Encode appends src, the image's bytes at off, compressed as a stream of
// its own, to dst; eof says src ends the image. In zstd, its runs of
// zeros (Segments) are zero frames (AppendZstdZeros), which a cast's
// decoder never decodes, and the data between them frames of their own.
func (c *ChunkEncoder) Encode(dst, src []byte, off int64, eof bool) ([]byte, error) {
	if c.z != nil {
		Segments(src, off, MinZeroRun, eof, func(s Segment) {
			p := src[s.Off-off:][:s.Len]
			if s.Zero {
				dst = AppendZstdZeros(dst, int64(len(p)))
			} else {
				dst = c.z.EncodeAll(p, dst)
			}
		})
		return dst, nil
	}
	c.out.Reset()
	c.gz.Reset(&c.out)
	if _, err := c.gz.Write(src); err != nil {
		return dst, fmt.Errorf("gzip: %w", err)
	}
	if err := c.gz.Close(); err != nil {
		return dst, fmt.Errorf("gzip: %w", err)
	}
	return append(dst, c.out.Bytes()...), nil
}

// EncoderID names the encoder a source compresses enc on the fly with
// (ChunkEncoder), down to its library's version: a cast taken up again
// after a restart must compress the image to the same bytes, or the nodes
// would get a stream spliced from two encodings (and, keyed, frames of
// other bytes under the same nonces).
func EncoderID(enc Encoding) string {
	mod := ""
	switch enc {
	case Zstd, Gzip:
		mod = "github.com/klauspost/compress"
	default:
		return ""
	}
	version := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == mod {
				version = d.Version
				if d.Replace != nil {
					version = d.Replace.Path + "@" + d.Replace.Version
				}
			}
		}
	}
	zeros := ""
	if enc == Zstd {
		zeros = ", zero runs of " + fmt.Sprint(MinZeroRun>>10) + " KiB up as zero frames"
	}
	return fmt.Sprintf("%s fastest in chunks of %d KiB%s, %s %s", enc, ChunkSize>>10, zeros, mod, version)
}
