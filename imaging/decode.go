package imaging

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
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
// it decodes an image of mostly free space).
func NewStreamDecoder(enc Encoding, r io.Reader) (io.ReadCloser, error) {
	return newDecoder(enc, r, false)
}

func newDecoder(enc Encoding, r io.Reader, checked bool) (io.ReadCloser, error) {
	switch enc {
	case Raw:
		return io.NopCloser(r), nil
	case Zstd:
		// RLE blocks reach the decoder as raw ones (rleAsRaw), which it
		// decodes faster.
		d, err := zstd.NewReader(newRLEAsRaw(r),
			// One goroutine: more only adds hand-offs (more CPU per byte)
			// for little speed, and nodes often share their cores.
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(MaxZstdWindow),
			zstd.WithDecoderLowmem(true),
			zstd.IgnoreChecksum(!checked))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return zstdReadCloser{d}, nil
	case Gzip:
		d, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unknown encoding %v", enc)
}

// zstdReadCloser adapts zstd.Decoder, whose Close returns nothing.
type zstdReadCloser struct{ *zstd.Decoder }

func (z zstdReadCloser) Close() error {
	z.Decoder.Close()
	return nil
}
