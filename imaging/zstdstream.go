package imaging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// zstdStream decodes a zstd stream frame by frame: a zero frame
// (AppendZstdZeros) becomes its run of zeros, undecoded; every other
// frame goes through the decoder, its RLE blocks rewritten as raw ones
// (rleAsRaw). Decoding one frame at a time keeps the runs in their place
// between the decoded bytes whatever the decoder reads ahead.
//
// WriteTo decodes a frame of at most LentSize bytes, as a source
// compressing on the fly makes them (ChunkEncoder), whole when the writer
// lends a buffer (BufferLender): into it, from where the target writes it
// uncopied. Larger frames, as zstd's tool makes them, stream.
type zstdStream struct {
	checked bool // the frames' checksums are checked
	src     Peeker
	rle     *rleAsRaw // over src, one frame at a time
	dec     *zstd.Decoder
	inFrame bool  // dec is reading a frame
	zeros   int64 // zeros of a zero frame still to hand out (Read)

	whole *zstd.Decoder // decodes frames whole (DecodeAll); made when first needed
	frame []byte        // the compressed frame decoded whole
}

func newZstdStream(r io.Reader, checked bool) (*zstdStream, error) {
	src := peeker(r)
	dec, err := newZstdDecoder(checked)
	if err != nil {
		return nil, err
	}
	return &zstdStream{checked: checked, src: src, rle: newRLEAsRaw(src), dec: dec}, nil
}

func newZstdDecoder(checked bool) (*zstd.Decoder, error) {
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
	return dec, nil
}

// next moves to the next frame: it returns the run of a zero frame, or 0
// with the decoder set on the frame; io.EOF at the stream's end. A frame
// small enough to be decoded whole, when w lends a buffer for it, is left
// to decodeWhole instead, with the buffer lent.
func (z *zstdStream) next(w io.Writer) (run int64, lent []byte, err error) {
	run, err = z.skipToFrame()
	if err != nil || run > 0 {
		return run, nil, err
	}
	z.rle.nextFrame()
	if w != nil && z.fitsWhole() {
		if lent = LendFrom(w); lent != nil {
			return 0, lent, nil
		}
	}
	if err := z.dec.Reset(z.rle); err != nil {
		return 0, nil, fmt.Errorf("zstd: %w", err)
	}
	z.inFrame = true
	return 0, nil, nil
}

// skipToFrame passes over skippable frames and takes a zero frame in: it
// returns the zero frame's run, or 0 at a frame to decode.
func (z *zstdStream) skipToFrame() (int64, error) {
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
	return 0, nil
}

// fitsWhole reports whether decodeWhole decodes the frame ahead
// (decodesWhole).
func (z *zstdStream) fitsWhole() bool {
	b, _ := z.src.Peek(zstd.HeaderMaxSize)
	var h zstd.Header
	if err := h.Decode(b); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	return decodesWhole(h)
}

// decodesWhole says a frame is decoded whole into a lent buffer: it says
// it decodes to at most LentSize bytes, with no dictionary, and its window
// holds all of it, so none of its zeros would have gone past a streaming
// decoder (skippingHeader) that now reach this one.
func decodesWhole(h zstd.Header) bool {
	return h.HeaderSize > 0 && !h.Skippable && h.HasFCS && h.FrameContentSize <= LentSize && h.DictionaryID == 0 &&
		(h.SingleSegment || h.WindowSize >= h.FrameContentSize)
}

// maxWholeFrame bounds a frame decodeWhole takes in: what a frame of
// LentSize bytes compresses to at worst, RLE blocks made raw (rleAsRaw),
// and then some. A frame of many tiny blocks, or a damaged one, may run
// past it: it is streamed instead.
const maxWholeFrame = LentSize + LentSize/8

// decodeWhole reads the frame ahead whole, decodes it into lent, which w
// lent, writes it to w and returns lent.
func (z *zstdStream) decodeWhole(w io.Writer, lent []byte) (int64, error) {
	defer ReturnTo(w, lent)
	z.frame = z.frame[:0]
	for {
		if len(z.frame) == cap(z.frame) {
			if cap(z.frame) >= maxWholeFrame {
				// What was read, then the rest, through the decoder's
				// window; a damaged frame gets the decoder's own error.
				if err := z.dec.Reset(io.MultiReader(bytes.NewReader(z.frame), z.rle)); err != nil {
					return 0, fmt.Errorf("zstd: %w", err)
				}
				return z.dec.WriteTo(w)
			}
			z.frame = slices.Grow(z.frame, 256<<10)
		}
		n, err := z.rle.Read(z.frame[len(z.frame):cap(z.frame)])
		z.frame = z.frame[:len(z.frame)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("zstd: %w", err)
		}
	}
	if z.whole == nil {
		dec, err := newZstdDecoder(z.checked)
		if err != nil {
			return 0, err
		}
		z.whole = dec
	}
	out, err := z.whole.DecodeAll(z.frame, lent[:0])
	if err != nil {
		return 0, fmt.Errorf("zstd: %w", err)
	}
	n, err := w.Write(out)
	return int64(n), err
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
		run, _, err := z.next(nil)
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
			run, lent, err := z.next(w)
			if errors.Is(err, io.EOF) {
				return total, nil
			}
			if err != nil {
				return total, err
			}
			if lent != nil {
				n, err := z.decodeWhole(w, lent)
				total += n
				if err != nil {
					return total, err
				}
				continue
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
	if z.whole != nil {
		z.whole.Close()
	}
	return nil
}

// noEOF makes an end of input inside a frame an unexpected one.
func noEOF(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
