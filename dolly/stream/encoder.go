package stream

import (
	"errors"
	"fmt"
	"io"

	"dolly/imaging"
)

// Encoder turns an image into the stream: a header, then frames. A raw
// stream is scanned for zero runs, which travel as zero frames instead of
// data. A compressed stream travels as data frames of compressed bytes.
// The stream may differ from how the image is stored: a compressed image
// can be sent raw (decoded here) and a raw one compressed (encoded here,
// on all cores), as the plan decides.
type Encoder struct {
	h     StreamHeader
	r     io.Reader
	total int64 // bytes r yields, or -1 when only EOF tells
	zeros bool  // raw framing: scan for zero runs

	digest *imaging.Digester   // computed here from the raw bytes
	final  imaging.Digest      // known in advance, or once the end is out
	later  chan imaging.Digest // delivered by the on-the-fly encoder
	stop   func()              // stops the on-the-fly encoder
	closer []func() error      // what Close releases

	// holes, for a raw image sent as stored, tells where its file keeps
	// holes (imaging.Image.NextData): they are sent as zero runs unread.
	holes   func(off int64) (data, hole int64, ok bool)
	seek    io.Seeker // e.r, to step over a hole
	dataEnd int64     // the file's stored bytes from off run at least to here
	unread  int64     // bytes of holes sent as zeros without reading them
	// compressHoles is where a raw image compressed on the fly keeps
	// holes; nil if not known.
	compressHoles *rawHoles

	buf     []byte
	queue   []imaging.Segment // segments of buf not yet framed
	bufOff  int64             // offset of buf[0]
	off     int64             // offset of the next byte to read
	eof     bool
	zeroOff int64 // pending zero run carried across buffers
	zeroLen int64
	seq     uint64
	wire    []byte
	ended   bool
	key     *FrameKey // nil: an unkeyed cast
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

// NewEncoder prepares the stream of im, sent as send. A compressed image
// must have been scanned (its raw size and digest known). Close releases
// what the encoder holds.
func NewEncoder(im *imaging.Image, cast CastID, frameSize int, send imaging.Encoding) (*Encoder, error) {
	if err := CheckFrameSize(frameSize); err != nil {
		return nil, err
	}
	if im.Encoding.Compressed() && im.Digest.IsZero() {
		return nil, fmt.Errorf("image %s must be scanned before it is cast", im.Path)
	}
	e := newEncoder(cast, im.Size, frameSize, send)
	switch {
	case send == im.Encoding && send == imaging.Raw:
		e.r, e.total, e.zeros = im.Stream(), im.Size, true
		e.h.StreamSize = im.Size
		e.digest = imaging.NewDigester()
		if sk, ok := e.r.(io.Seeker); ok {
			e.seek, e.holes = sk, im.NextData
		}
	case send == im.Encoding:
		e.r, e.total = im.Stream(), im.StreamSize
		e.h.StreamSize = im.StreamSize
		e.final = im.Digest
	case send == imaging.Raw:
		dec, err := imaging.NewDecoder(im.Encoding, im.Stream())
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Path, err)
		}
		e.closer = append(e.closer, dec.Close)
		e.r, e.total, e.zeros = dec, im.Size, true
		e.h.StreamSize = im.Size
		e.digest = imaging.NewDigester()
	case im.Encoding == imaging.Raw:
		r := im.Stream()
		var holes *rawHoles
		if sk, ok := r.(io.Seeker); ok {
			holes = &rawHoles{next: im.NextData, seek: sk, size: im.Size}
		}
		e.r, e.total = e.compressOnTheFly(r, holes, send)
		e.compressHoles = holes
		e.h.StreamSize = 0 // unknown until the end
	default:
		return nil, fmt.Errorf("image %s is %s: it can be sent as stored or raw, not as %s", im.Path, im.Encoding, send)
	}
	return e, nil
}

// newEncoder is an encoder of a stream's header, its source not yet set.
func newEncoder(cast CastID, size int64, frameSize int, send imaging.Encoding) *Encoder {
	return &Encoder{
		h: StreamHeader{
			Version:   Version,
			Encoding:  send,
			FrameSize: uint32(frameSize),
			Cast:      cast,
			ImageSize: size,
		},
		buf:  make([]byte, frameSize),
		wire: make([]byte, 0, FrameHeaderLen+endPayloadLen),
	}
}

// NewCompressingEncoder is the encoder NewEncoder makes of a raw image sent
// compressed, over the raw bytes r yields instead of an image file: the
// source's whole compressing path, for the probe that times it on samples.
// size is what the header and the end frame state as the image's size.
func NewCompressingEncoder(r io.Reader, size int64, frameSize int, send imaging.Encoding) (*Encoder, error) {
	if err := CheckFrameSize(frameSize); err != nil {
		return nil, err
	}
	if !send.Compressed() {
		return nil, fmt.Errorf("%s is no compression", send)
	}
	e := newEncoder(CastID{}, size, frameSize, send)
	e.r, e.total = e.compressOnTheFly(r, nil, send)
	return e, nil
}

// Close stops any on-the-fly encoding and releases decoders.
func (e *Encoder) Close() error {
	if e.stop != nil {
		e.stop()
	}
	var errs []error
	for _, c := range e.closer {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// Header returns the stream header.
func (e *Encoder) Header() StreamHeader { return e.h }

// SetKey protects the stream with the cast's frame key: every frame gets a
// tag and, if the key says so, an encrypted payload. Call it before Next.
func (e *Encoder) SetKey(k *FrameKey) {
	e.key = k
	e.h.seal(k)
}

// Chunk is the next piece of the stream: a frame header and its payload,
// both valid until the next call to Next.
type Chunk struct {
	Header  []byte
	Payload []byte
	Tag     []byte // in a keyed cast
	Kind    FrameKind
	Raw     int64 // raw image bytes this chunk accounts for (0 if not known)
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
				if e.digest != nil {
					e.digest.WriteZeros(int64(s.Len))
				}
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
		if e.eof {
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
	// Up to the next multiple of the frame size: after a hole that ends
	// within one, frames keep to the grid, and a frame of the default size
	// is one block of the digest, whose CRC a node takes from the frame's
	// without reading its payload again (imaging.Digester.WriteCRC).
	want := len(e.buf) - int(e.off%int64(len(e.buf)))
	if e.total >= 0 {
		want = int(min(int64(want), e.total-e.off))
	}
	if e.holes != nil && want > 0 {
		stored, err := e.skipHole()
		if err != nil || stored == 0 {
			return err // a hole was queued as zeros
		}
		if stored > 0 {
			want = int(min(int64(want), stored))
		}
	}
	n, err := io.ReadFull(e.r, e.buf[:want])
	switch {
	case e.total < 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		e.eof = true
	case err != nil:
		return fmt.Errorf("reading image at offset %d: %w", e.off, err)
	}
	e.bufOff = e.off
	e.off += int64(n)
	if e.total >= 0 && e.off == e.total {
		e.eof = true
	}
	e.queue = e.queue[:0]
	if n == 0 {
		return nil
	}
	p := e.buf[:n]
	if !e.zeros {
		e.queue = append(e.queue, imaging.Segment{Off: e.bufOff, Len: n})
		return nil
	}
	// The digest is fed as segments are framed (Next), so that a data
	// segment's bytes are read once, for its frame's CRC.
	imaging.Segments(p, e.bufOff, imaging.MinZeroRun, e.eof, func(s imaging.Segment) {
		e.queue = append(e.queue, s)
	})
	return nil
}

// skipHole queues the hole of the image file at e.off as a zero run,
// without reading it, and returns 0; or returns how many bytes from e.off
// on are worth reading before the next hole (-1: not known).
func (e *Encoder) skipHole() (int64, error) {
	if e.off < e.dataEnd {
		return e.dataEnd - e.off, nil
	}
	data, hole, ok := e.holes(e.off)
	if !ok {
		e.holes = nil
		return -1, nil
	}
	if end, skip := imaging.HoleRun(e.off, data, e.total); skip {
		if _, err := e.seek.Seek(end, io.SeekStart); err != nil {
			return 0, fmt.Errorf("reading image at offset %d: %w", end, err)
		}
		e.queue = append(e.queue[:0], imaging.Segment{Off: e.off, Len: int(end - e.off), Zero: true})
		e.unread += end - e.off
		e.bufOff, e.off = e.off, end
		e.eof = e.off == e.total
		return 0, nil
	}
	// Read up to the next hole, from its first whole block on.
	e.dataEnd = min(e.total, (hole+imaging.ZeroBlock-1)/imaging.ZeroBlock*imaging.ZeroBlock)
	if e.dataEnd <= e.off {
		return -1, nil
	}
	return e.dataEnd - e.off, nil
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
	c := Chunk{Header: e.wire, Kind: FrameZero, Raw: n}
	if e.key != nil {
		_, c.Tag = e.key.seal(f.Seq, c.Header, nil)
	}
	return c, true
}

func (e *Encoder) dataChunk(off int64, p []byte) Chunk {
	f := Frame{Kind: FrameData, Seq: e.seq, Offset: off, Length: int64(len(p)), CRC: imaging.CRC32C(p)}
	if e.digest != nil {
		e.digest.WriteCRC(p, f.CRC)
	}
	e.seq++
	e.wire = AppendFrameHeader(e.wire[:0], f)
	raw := int64(len(p))
	if e.h.Encoding.Compressed() {
		raw = 0 // raw progress of compressed streams is only known after decoding
	}
	c := Chunk{Header: e.wire, Payload: p, Kind: FrameData, Raw: raw}
	if e.key != nil {
		c.Payload, c.Tag = e.key.seal(f.Seq, c.Header, p)
	}
	return c
}

func (e *Encoder) endChunk() (Chunk, error) {
	switch {
	case e.digest != nil:
		e.final = e.digest.Sum()
	case e.later != nil:
		select {
		case e.final = <-e.later:
		default:
			return Chunk{}, errors.New("on-the-fly encoder ended without a digest")
		}
	}
	e.ended = true
	e.wire = append(e.wire[:0], EndFrame(e.seq, End{Digest: e.final, Size: e.h.ImageSize, Frames: e.seq}, e.key)...)
	return Chunk{Header: e.wire, Kind: FrameEnd}, nil
}

// Digest is the source's content digest, known once the end frame is out.
func (e *Encoder) Digest() imaging.Digest { return e.final }
