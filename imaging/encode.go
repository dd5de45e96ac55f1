package imaging

import (
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

// EncoderID names the encoder Compress runs for enc, down to its library's
// version: a cast taken up again after a restart must compress the image
// to the same bytes, or the nodes would get a stream spliced from two
// encodings (and, keyed, frames of other bytes under the same nonces).
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
	return fmt.Sprintf("%s fastest, %s %s", enc, mod, version)
}
