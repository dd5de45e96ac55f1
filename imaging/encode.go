package imaging

import (
	"fmt"
	"io"
	"runtime"

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
