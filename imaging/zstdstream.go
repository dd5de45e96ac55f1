package imaging

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// zstdStream decodes a zstd stream frame by frame: a zero frame
// (AppendZstdZeros) becomes its run of zeros, undecoded; every other
// frame goes through the decoder, its RLE blocks rewritten as raw ones
// (rleAsRaw). Decoding one frame at a time keeps the runs in their place
// between the decoded bytes whatever the decoder reads ahead.
type zstdStream struct {
	checked bool // the frames' checksums are checked
	src     Peeker
	rle     *rleAsRaw // over src, one frame at a time
	dec     *zstd.Decoder
	inFrame bool  // dec is reading a frame
	zeros   int64 // zeros of a zero frame still to hand out (Read)
}

func newZstdStream(r io.Reader, checked bool) (*zstdStream, error) {
	src := peeker(r)
	dec, err := zstd.NewReader(nil,
		// One goroutine: more only adds hand-offs (more CPU per byte)
		// for little speed, and nodes often share their cores.
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(MaxZstdWindow),
		zstd.WithDecoderLowmem(true),
		zstd.IgnoreChecksum(!checked))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return &zstdStream{checked: checked, src: src, rle: newRLEAsRaw(src), dec: dec}, nil
}

// next moves to the next frame: it returns the run of a zero frame, or 0
// with the decoder set on the frame; io.EOF at the stream's end.
func (z *zstdStream) next() (int64, error) {
	b, err := z.src.Peek(zstdZeroHeaderLen)
	for len(b) >= 8 && b[0]&0xf0 == 0x50 && [3]byte(b[1:4]) == [3]byte{0x2a, 0x4d, 0x18} {
		// A skippable frame, which decodes to nothing.
		size := 8 + int(binary.LittleEndian.Uint32(b[4:]))
		if n, err := z.src.Discard(size); n < size {
			return 0, fmt.Errorf("zstd: a skippable frame cut short: %w", noEOF(err))
		}
		b, err = z.src.Peek(zstdZeroHeaderLen)
	}
	if len(b) == 0 {
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	if size, _, ok := zstdZeroFrameLen(b); ok {
		f, _ := z.src.Peek(size)
		if size, run, ok := zstdZeroFrame(f); ok {
			z.src.Discard(size)
			return run, nil
		}
	}
	z.rle.nextFrame()
	if err := z.dec.Reset(z.rle); err != nil {
		return 0, fmt.Errorf("zstd: %w", err)
	}
	z.inFrame = true
	return 0, nil
}

func (z *zstdStream) Read(p []byte) (int, error) {
	for {
		switch {
		case len(p) == 0:
			return 0, nil
		case z.zeros > 0:
			n := int(min(int64(len(p)), z.zeros))
			clear(p[:n])
			z.zeros -= int64(n)
			return n, nil
		case z.inFrame:
			n, err := z.dec.Read(p)
			if errors.Is(err, io.EOF) {
				z.inFrame = false
				if n == 0 {
					continue
				}
				err = nil
			}
			return n, err
		}
		run, err := z.next()
		if err != nil {
			return 0, err
		}
		z.zeros = run
	}
}

// WriteTo writes the decoded stream to w, handing it zero frames as runs
// when w is a ZeroWriter. The decoder writes from its own window, which
// spares a copy through a buffer.
func (z *zstdStream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		// What a Read left of a frame comes first.
		if !z.inFrame && z.zeros == 0 {
			run, err := z.next()
			if errors.Is(err, io.EOF) {
				return total, nil
			}
			if err != nil {
				return total, err
			}
			z.zeros = run
		}
		if z.zeros > 0 {
			run := z.zeros
			z.zeros = 0
			if err := writeZeroRun(w, run); err != nil {
				return total, err
			}
			total += run
			continue
		}
		n, err := z.decodeFrameTo(w)
		total += n
		z.inFrame = false
		if err != nil {
			return total, err
		}
	}
}

// decodeFrameTo decodes the frame the decoder is on to w. Unless it checks
// checksums, the zeros deep in a run of them go past the decoder
// (skipZeros).
func (z *zstdStream) decodeFrameTo(w io.Writer) (int64, error) {
	if z.checked {
		return z.dec.WriteTo(w)
	}
	var zeros int64
	z.rle.emit = func(n int64) error {
		zeros += n
		return writeZeroRun(w, n)
	}
	defer func() { z.rle.emit = nil }()
	n, err := z.dec.WriteTo(w)
	return n + zeros, err
}

func (z *zstdStream) Close() error {
	z.dec.Close()
	return nil
}

// noEOF makes an end of input inside a frame an unexpected one.
func noEOF(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
