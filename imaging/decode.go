package imaging

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// MaxZstdWindow bounds the memory a zstd stream may ask for. Images made
// with --long or --ultra use up to 128 MiB; nothing legitimate needs more.
const MaxZstdWindow = 128 << 20

// NewDecoder returns a reader of the raw image bytes encoded in r, which
// checks the format's own checksums: a stored image is checked so.
// A raw encoding returns r itself (wrapped to satisfy io.ReadCloser).
func NewDecoder(enc Encoding, r io.Reader) (io.ReadCloser, error) {
	return newDecoder(enc, r, true)
}

// NewStreamDecoder is NewDecoder for a cast's stream, whose every byte
// the frames' CRCs and the content digest check already: it skips zstd's
// own checksum (an xxhash64 of the output, a tenth of a node's CPU when
// it decodes an image of mostly free space). A zstd stream read from a
// Peeker is read where it lies, not copied into a buffer first.
func NewStreamDecoder(enc Encoding, r io.Reader) (io.ReadCloser, error) {
	return newDecoder(enc, r, false)
}

func newDecoder(enc Encoding, r io.Reader, checked bool) (io.ReadCloser, error) {
	switch enc {
	case Raw:
		return io.NopCloser(r), nil
	case Zstd:
		// Zero frames are handed on as runs of zeros, undecoded, and RLE
		// blocks reach the decoder as raw ones, which it decodes faster
		// (zstdStream).
		return newZstdStream(r, checked)
	case Gzip:
		d, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unknown encoding %v", enc)
}
