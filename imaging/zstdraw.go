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
	src *bufio.Reader

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
}

type rleState int

const (
	rleFrame       rleState = iota // at a frame's header
	rleBlock                       // at a block's header
	rlePassThrough                 // handing on the rest unchanged
)

func newRLEAsRaw(r io.Reader) *rleAsRaw {
	return &rleAsRaw{src: bufio.NewReaderSize(r, 64<<10)}
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
	if head&1 == 1 { // the frame's last block
		z.state = rleFrame
	}
	switch (head >> 1) & 3 {
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
