package dolly

import (
	"fmt"
	"io"

	"dolly/imaging"
)

// Encoder turns an image into the stream: a header, then frames. Raw images
// are scanned for zero runs, which travel as zero frames instead of data.
// Compressed images travel as they are stored, cut into data frames.
type Encoder struct {
	h      StreamHeader
	r      io.Reader
	digest *imaging.Digester // raw images: computed on the way
	final  imaging.Digest    // compressed images: known from the scan

	buf     []byte
	queue   []imaging.Segment // segments of buf not yet framed
	bufOff  int64             // offset of buf[0]
	off     int64             // offset of the next byte to read
	zeroOff int64             // pending zero run carried across buffers
	zeroLen int64
	seq     uint64
	wire    []byte
	ended   bool
}

// CheckFrameSize validates a frame size: a multiple of the zero-detection
// block, at most MaxFrameSize.
func CheckFrameSize(n int) error {
	if n < imaging.ZeroBlock || n > MaxFrameSize || n%imaging.ZeroBlock != 0 {
		return fmt.Errorf("frame size %d: must be a multiple of %d KiB between %d KiB and %d MiB",
			n, imaging.ZeroBlock>>10, imaging.ZeroBlock>>10, MaxFrameSize>>20)
	}
	return nil
}

// NewEncoder prepares the stream of im for cast. A compressed image must
// have been scanned (its raw size and digest known).
func NewEncoder(im *imaging.Image, cast CastID, frameSize int) (*Encoder, error) {
	if err := CheckFrameSize(frameSize); err != nil {
		return nil, err
	}
	if im.Encoding.Compressed() && im.Digest.IsZero() {
		return nil, fmt.Errorf("image %s must be scanned before it is cast", im.Path)
	}
	e := &Encoder{
		h: StreamHeader{
			Version:    Version,
			Encoding:   im.Encoding,
			FrameSize:  uint32(frameSize),
			Cast:       cast,
			ImageSize:  im.Size,
			StreamSize: im.StreamSize,
		},
		r:     im.Stream(),
		final: im.Digest,
		buf:   make([]byte, frameSize),
		wire:  make([]byte, 0, FrameHeaderLen+endPayloadLen),
	}
	if im.Encoding == imaging.Raw {
		e.digest = imaging.NewDigester()
	}
	return e, nil
}

// Header returns the encoded stream header.
func (e *Encoder) Header() StreamHeader { return e.h }

// Chunk is the next piece of the stream: a frame header and its payload,
// both valid until the next call to Next.
type Chunk struct {
	Header  []byte
	Payload []byte
	Kind    FrameKind
	Raw     int64 // raw image bytes this chunk accounts for
}

// Next returns the next frame of the stream; io.EOF after the end frame.
func (e *Encoder) Next() (Chunk, error) {
	for {
		if e.ended {
			return Chunk{}, io.EOF
		}
		if len(e.queue) > 0 {
			s := e.queue[0]
			e.queue = e.queue[1:]
			if s.Zero {
				e.addZeros(s.Off, int64(s.Len))
				if c, ok := e.takeZeros(false); ok {
					return c, nil
				}
				continue
			}
			if c, ok := e.takeZeros(true); ok {
				e.queue = append([]imaging.Segment{s}, e.queue...)
				return c, nil
			}
			return e.dataChunk(s.Off, e.buf[s.Off-e.bufOff:][:s.Len]), nil
		}
		if e.off == e.h.StreamSize {
			if c, ok := e.takeZeros(true); ok {
				return c, nil
			}
			return e.endChunk()
		}
		if err := e.fill(); err != nil {
			return Chunk{}, err
		}
	}
}

// fill reads the next buffer and queues its segments.
func (e *Encoder) fill() error {
	n := int(min(int64(len(e.buf)), e.h.StreamSize-e.off))
	if _, err := io.ReadFull(e.r, e.buf[:n]); err != nil {
		return fmt.Errorf("reading image at offset %d: %w", e.off, err)
	}
	e.bufOff = e.off
	e.off += int64(n)
	if e.digest == nil {
		e.queue = append(e.queue[:0], imaging.Segment{Off: e.bufOff, Len: n})
		return nil
	}
	p := e.buf[:n]
	e.queue = e.queue[:0]
	imaging.Segments(p, e.bufOff, imaging.MinZeroRun, e.off == e.h.StreamSize, func(s imaging.Segment) {
		if s.Zero {
			e.digest.WriteZeros(int64(s.Len))
		} else {
			e.digest.Write(p[s.Off-e.bufOff:][:s.Len])
		}
		e.queue = append(e.queue, s)
	})
	return nil
}

func (e *Encoder) addZeros(off, n int64) {
	if e.zeroLen == 0 {
		e.zeroOff = off
	}
	e.zeroLen += n
}

// takeZeros emits the pending zero run once it is long enough, or all of it
// when flush is set.
func (e *Encoder) takeZeros(flush bool) (Chunk, bool) {
	if e.zeroLen == 0 || (!flush && e.zeroLen < maxZeroFrame) {
		return Chunk{}, false
	}
	n := min(e.zeroLen, maxZeroFrame)
	f := Frame{Kind: FrameZero, Seq: e.seq, Offset: e.zeroOff, Length: n}
	e.seq++
	e.zeroOff += n
	e.zeroLen -= n
	e.wire = AppendFrameHeader(e.wire[:0], f)
	return Chunk{Header: e.wire, Kind: FrameZero, Raw: n}, true
}

func (e *Encoder) dataChunk(off int64, p []byte) Chunk {
	f := Frame{Kind: FrameData, Seq: e.seq, Offset: off, Length: int64(len(p)), CRC: imaging.CRC32C(p)}
	e.seq++
	e.wire = AppendFrameHeader(e.wire[:0], f)
	raw := int64(len(p))
	if e.h.Encoding.Compressed() {
		raw = 0 // raw progress of compressed streams is only known after decoding
	}
	return Chunk{Header: e.wire, Payload: p, Kind: FrameData, Raw: raw}
}

func (e *Encoder) endChunk() (Chunk, error) {
	d := e.final
	if e.digest != nil {
		d = e.digest.Sum()
	}
	e.final = d
	e.ended = true
	e.wire = append(e.wire[:0], EndFrame(e.seq, End{Digest: d, Size: e.h.ImageSize, Frames: e.seq})...)
	return Chunk{Header: e.wire, Kind: FrameEnd}, nil
}

// Digest is the source's content digest, known once the end frame is out.
func (e *Encoder) Digest() imaging.Digest { return e.final }
