package imaging

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"

	"github.com/klauspost/compress/zstd"
)

// zeroBlock is a block of zeros to copy from; it is never written.
var zeroBlock [zstdMaxBlock]byte

// rleAsRaw rewrites a zstd stream on its way to the decoder: each RLE
// block (one byte repeated) becomes a raw block of the same bytes. Both
// decode to the same output and leave the decoder's state (history,
// entropy tables, repeat offsets) alike, but the decoder fills an RLE
// block one byte at a time, while a raw block is a copy: zstd's tool
// writes a filesystem's free space as RLE blocks of zeros, which then
// decode several times faster.
//
// Anything it does not understand (a damaged header, a reserved block
// type, a block too large) it hands on unchanged, from there to the end,
// so that the decoder reports the error it would have reported anyway.
type rleAsRaw struct {
	src Peeker

	state   rleState
	pending []byte // header bytes to hand out first
	head    [zstd.HeaderMaxSize]byte
	copyN   int64 // bytes of the source to hand on as they are
	fillN   int   // bytes of fill to hand out
	fill    []byte
	fillOf  byte // the byte fill holds, when it is not zeroBlock
	check   bool // the frame ends with a checksum
	ownFill []byte
	// single makes the reader end (io.EOF) where the frame it began
	// ends, so that the decoder reads one frame at a time (zstdStream);
	// began says a frame has begun.
	single, began bool

	// With emit set, RLE blocks of zero deep in a run of zeros never
	// reach the decoder (see skipZeros): emit hands them on instead.
	emit    func(n int64) error
	window  int64 // the frame's window, if its zeros may be skipped (0: not)
	zeroRun int64 // zeros the decoder has had in a row, up to now
	skipped int64 // zeros skipped, not yet emitted
}

type rleState int

const (
	rleFrame       rleState = iota // at a frame's header
	rleBlock                       // at a block's header
	rlePassThrough                 // handing on the rest unchanged
)

func newRLEAsRaw(r io.Reader) *rleAsRaw {
	return &rleAsRaw{src: peeker(r)}
}

// A Peeker shows the bytes ahead before they are read, as a bufio.Reader
// does. A zstd stream's source that is one is read as it is; any other is
// read through a buffer, one more copy of every byte.
type Peeker interface {
	io.Reader
	// Peek returns the next n bytes without reading them; fewer only
	// with an error (io.EOF at the end).
	Peek(n int) ([]byte, error)
	// Discard skips the next n bytes; fewer only with an error.
	Discard(n int) (int, error)
}

func peeker(r io.Reader) Peeker {
	if p, ok := r.(Peeker); ok {
		return p
	}
	return bufio.NewReaderSize(r, 64<<10)
}

// nextFrame makes a reader in single mode hand on the next frame.
func (z *rleAsRaw) nextFrame() {
	z.single, z.began = true, false
}

func (z *rleAsRaw) Read(p []byte) (int, error) {
	for {
		switch {
		case len(p) == 0:
			return 0, nil
		case len(z.pending) > 0:
			n := copy(p, z.pending)
			z.pending = z.pending[n:]
			return n, nil
		case z.fillN > 0:
			n := copy(p, z.fill[:z.fillN])
			z.fillN -= n
			return n, nil
		case z.copyN > 0:
			n, err := z.src.Read(p[:min(int64(len(p)), z.copyN)])
			z.copyN -= int64(n)
			if errors.Is(err, io.EOF) && z.copyN > 0 {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		case z.state == rlePassThrough:
			return z.src.Read(p)
		}
		if err := z.next(); err != nil {
			return 0, err
		}
	}
}

// next reads the header of the next frame or block and sets up what to
// hand out for it.
func (z *rleAsRaw) next() error {
	if z.state == rleFrame {
		if z.single && z.began {
			return io.EOF
		}
		b, err := z.src.Peek(zstd.HeaderMaxSize)
		if len(b) == 0 {
			return err // io.EOF between frames: the stream's end
		}
		var h zstd.Header
		if err := h.Decode(b); err != nil || h.HeaderSize == 0 {
			z.state = rlePassThrough
			return nil
		}
		if h.Skippable {
			z.copyN = int64(h.HeaderSize) + int64(h.SkippableSize)
			return nil
		}
		z.pending = z.head[:copy(z.head[:], b[:h.HeaderSize])]
		z.window, z.zeroRun, z.skipped = 0, 0, 0
		if z.emit != nil {
			if head, ok := skippingHeader(h, z.pending); ok {
				z.pending, z.window = head, int64(h.WindowSize)
			}
		}
		z.src.Discard(h.HeaderSize)
		z.check = h.HasCheckSum
		z.state = rleBlock
		z.began = true
		return nil
	}

	b, _ := z.src.Peek(4)
	if len(b) < 3 {
		z.state = rlePassThrough
		return nil
	}
	head := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
	size := int64(head >> 3)
	last := head&1 == 1
	kind := (head >> 1) & 3
	if kind == zstdBlockRLE && len(b) == 4 && b[3] == 0 && z.emit != nil && skipsZeros(z.window, z.zeroRun, size, last) {
		z.skipped += size
		z.src.Discard(4)
		return nil
	}
	if z.skipped > 0 && z.emit != nil {
		// The decoder has written all it decoded before this block
		// (it reads a block only once the last one is out).
		n := z.skipped
		z.skipped = 0
		if err := z.emit(n); err != nil {
			return err
		}
	}
	if kind == zstdBlockRLE && len(b) == 4 && b[3] == 0 {
		z.zeroRun += size
	} else {
		z.zeroRun = 0
	}
	if last {
		z.state = rleFrame
	}
	switch kind {
	case zstdBlockRaw, zstdBlockCompressed:
		z.copyN = 3 + size
	case zstdBlockRLE:
		if len(b) < 4 || size > zstdMaxBlock {
			z.state = rlePassThrough
			return nil
		}
		binary.LittleEndian.PutUint32(z.head[:4], head&^(3<<1)) // raw
		z.pending = z.head[:3]
		z.setFill(b[3])
		z.fillN = int(size)
		z.src.Discard(4)
	default:
		z.state = rlePassThrough
		return nil
	}
	if z.state == rleFrame && z.check {
		z.copyN += 4
	}
	return nil
}

// setFill points fill at a block of v.
func (z *rleAsRaw) setFill(v byte) {
	if v == 0 {
		z.fill = zeroBlock[:]
		return
	}
	if z.ownFill == nil {
		z.ownFill = make([]byte, zstdMaxBlock)
	} else if z.fillOf == v {
		z.fill = z.ownFill
		return
	}
	for i := range z.ownFill {
		z.ownFill[i] = v
	}
	z.fillOf = v
	z.fill = z.ownFill
}

// skipZeros: a stored image compressed by zstd's tool is one frame, whose
// free space is RLE blocks of zero; decoding them still costs a copy into
// the decoder's window and out of it, and a scan. Once the decoder has had
// a whole window of zeros in a row, its window holds nothing but zeros,
// and more zeros leave it as it is (RLE and raw blocks change no other
// state of the decoder), so they need not reach it: the reader hands them
// on through emit, in place, for they come between two blocks, and the
// decoder writes out a block before it reads the next. The frame's last
// block always reaches it, and the frame's content size goes from its
// header (the decoder would find the frame short); its checksum, if any,
// is then not checked, which a stream decoder does not anyway.

// skipsZeros says whether an RLE block of size zeros goes past the
// decoder, after zeroRun zeros in a row in a frame of window (0: nothing
// is skipped in it). ZstdRLEBytes counts by the same rule.
func skipsZeros(window, zeroRun, size int64, last bool) bool {
	return window > 0 && !last && zeroRun >= window && size <= zstdMaxBlock
}

// skippingHeader returns the header head of a frame with header h as the
// decoder gets it when zeros may be skipped: without its content size.
// It is false for a frame no longer than its window, where nothing can
// be skipped, which keeps its header (and the decoder, its memory as the
// content size bounds it).
func skippingHeader(h zstd.Header, head []byte) ([]byte, bool) {
	if h.HasFCS && h.FrameContentSize <= h.WindowSize {
		return nil, false
	}
	return withoutContentSize(head)
}

// withoutContentSize returns the frame header head without its content
// size; false for a frame of a single segment, whose window is its size.
func withoutContentSize(head []byte) ([]byte, bool) {
	if len(head) < 6 || head[4]&0x20 != 0 {
		return nil, false
	}
	fhd := head[4]
	dictLen := [4]int{0, 1, 2, 4}[fhd&3]
	sizeLen := [4]int{0, 2, 4, 8}[fhd>>6]
	if len(head) != 6+dictLen+sizeLen {
		return nil, false
	}
	out := append(head[:0:0], head[:4]...)
	out = append(out, fhd&^0xc0, head[5])
	return append(out, head[6:6+dictLen]...), true
}
