package stream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"dolly/imaging"
)

// Counters are a node's progress, updated as frames are verified and written
// and read by the progress reporter.
type Counters struct {
	Stream  atomic.Int64 // stream bytes verified (frame payloads)
	Written atomic.Int64 // raw image bytes that reached the target
}

// ErrDigestMismatch means the bytes written differ from the source's.
var ErrDigestMismatch = errors.New("content digest differs from the source's")

// Hooks tell the caller of Receive what happens as it happens; either may
// be nil.
type Hooks struct {
	// EndSeen is called once the end frame has been verified: an upstream
	// that closes now has finished, not failed.
	EndSeen func()
	// TargetFailed is called once, when the target first fails.
	TargetFailed func(error)
	// Sums, if set, has the payloads' CRCs, computed as the relay took
	// the bytes in (relay.Config.Observe), so that checking a payload
	// need not read it again.
	Sums *PayloadSums
}

// Receive reads the verified frames that follow header h from r and writes
// the image to w. It returns the digest of what it wrote and the source's
// end frame; the image is verified when both digests are equal, which
// Receive checks (ErrDigestMismatch).
//
// A failing target does not stop the reading: the rest of the stream is
// verified and passed over (a relay must still forward it, and knows the
// stream is complete only from its end frame), and the target's first error
// is returned at the end.
//
// key is the cast's frame key (nil for an unkeyed cast): every frame's tag
// is then checked before the frame is written. c, if set, counts progress.
func Receive(r io.Reader, h StreamHeader, key *FrameKey, w imaging.BlockWriter, c *Counters, hooks Hooks) (imaging.Digest, End, error) {
	return receive(r, h, key, w, c, hooks, nil)
}

// ReceiveStored reads the verified frames of a compressed stream and
// writes their payloads to stored: the image as the source compressed
// it, a file that decodes to the raw image. It decodes them too, only to
// check the stream's digest, which it returns.
func ReceiveStored(r io.Reader, h StreamHeader, key *FrameKey, stored io.Writer, c *Counters) (imaging.Digest, End, error) {
	if !h.Encoding.Compressed() {
		return imaging.Digest{}, End{}, fmt.Errorf("a %s stream: only a compressed one is stored as it comes", h.Encoding)
	}
	return receive(r, h, key, discard{}, c, Hooks{}, stored)
}

// discard is a target that keeps nothing.
type discard struct{}

func (discard) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }
func (discard) ZeroRange(off, n int64) error             { return nil }

func receive(r io.Reader, h StreamHeader, key *FrameKey, w imaging.BlockWriter, c *Counters, hooks Hooks, stored io.Writer) (imaging.Digest, End, error) {
	if c == nil {
		c = new(Counters)
	}
	fw := &firstError{w: w, failed: hooks.TargetFailed}
	fr := NewFrameReader(r, h, key)
	fr.sums = hooks.Sums
	src := &frameSource{fr: fr, c: c, stored: stored, endSeen: hooks.EndSeen}
	var (
		d   imaging.Digest
		err error
	)
	if h.Encoding == imaging.Raw {
		d, err = receiveRaw(src, fw, c)
	} else {
		d, err = decode(src, h, fw, c)
	}
	switch {
	case src.err != nil:
		// The stream's own error says what went wrong first.
		return d, src.end, src.err
	case fw.err != nil:
		return d, src.end, fw.err
	case err != nil:
		return d, src.end, err
	}
	if err := src.atEnd(); err != nil {
		return d, src.end, err
	}
	end := src.end
	if end.Size != h.ImageSize {
		return d, end, fmt.Errorf("end frame announces %d bytes, header %d", end.Size, h.ImageSize)
	}
	if d != end.Digest {
		return d, end, fmt.Errorf("%w (wrote %s, source %s)", ErrDigestMismatch, d.Short(), end.Digest.Short())
	}
	return d, end, nil
}

// frameSource takes the verified frames of a stream one at a time, up to
// its end frame. As an io.Reader it is the stream of their payloads, which
// a decoder pulls in the receiving goroutine: no hand-off between
// goroutines costs a wake-up, and as an imaging.Peeker it lets zstd's
// decoder read the payloads where they lie, copied once, into its own
// buffer.
type frameSource struct {
	fr      *FrameReader
	c       *Counters
	stored  io.Writer // compressed payloads are stored as they come
	endSeen func()

	p     []byte // the bytes to read next: of the current payload, or carry
	after []byte // the rest of the current payload, when p is carry
	carry []byte // bytes Peek gathered across payloads
	end   End
	ended bool  // the end frame was verified
	err   error // the stream's (or the stored copy's), as opposed to the decoder's or the target's
}

var _ imaging.Peeker = (*frameSource)(nil)

// next returns the next frame before the end frame; ok is false at the
// end frame, or on an error, which s.err holds.
func (s *frameSource) next() (f Frame, ok bool) {
	if s.ended || s.err != nil {
		return Frame{}, false
	}
	f, err := s.fr.Next()
	if err == nil && f.Kind == FrameEnd {
		if s.end, err = ParseEnd(f.Payload); err == nil {
			s.ended = true
			if s.endSeen != nil {
				s.endSeen()
			}
			return Frame{}, false
		}
	}
	if err == nil && s.stored != nil {
		_, err = s.stored.Write(f.Payload)
	}
	if err != nil {
		s.err = err
		return Frame{}, false
	}
	s.c.Stream.Add(int64(len(f.Payload)))
	return f, true
}

// fill makes s.p hold at least a byte, or returns why it cannot: io.EOF
// at the end frame.
func (s *frameSource) fill() error {
	for len(s.p) == 0 {
		if len(s.after) > 0 {
			s.p, s.after = s.after, nil
			continue
		}
		f, ok := s.next()
		if !ok {
			return s.stop()
		}
		s.p = f.Payload
	}
	return nil
}

// stop is what ends the reading: the stream's error, or io.EOF.
func (s *frameSource) stop() error {
	if s.err != nil {
		return s.err
	}
	return io.EOF
}

func (s *frameSource) Read(p []byte) (int, error) {
	if err := s.fill(); err != nil {
		return 0, err
	}
	n := copy(p, s.p)
	s.p = s.p[n:]
	return n, nil
}

// Peek returns the next n bytes unread. Those that run past the current
// payload are gathered in s.carry, which outlives the payloads.
func (s *frameSource) Peek(n int) ([]byte, error) {
	if len(s.p) >= n {
		return s.p[:n], nil
	}
	s.carry = append(s.carry[:0], s.p...)
	for len(s.carry) < n {
		if len(s.after) == 0 {
			f, ok := s.next()
			if !ok {
				s.p = s.carry
				return s.p, s.stop()
			}
			s.after = f.Payload
		}
		k := min(n-len(s.carry), len(s.after))
		s.carry = append(s.carry, s.after[:k]...)
		s.after = s.after[k:]
	}
	s.p = s.carry
	return s.p[:n], nil
}

func (s *frameSource) Discard(n int) (int, error) {
	done := 0
	for done < n {
		if err := s.fill(); err != nil {
			return done, err
		}
		k := min(n-done, len(s.p))
		s.p = s.p[k:]
		done += k
	}
	return done, nil
}

// atEnd checks that only the end frame follows what the decoder read.
func (s *frameSource) atEnd() error {
	switch err := s.fill(); {
	case err == nil:
		return fmt.Errorf("compressed data goes on past the decoded image's end (frame %d)", s.fr.seq-1)
	case err != io.EOF:
		return err
	}
	return nil
}

// firstError passes writes on until one fails, then only records: the
// stream goes on being read after a disk error, and the first error is
// the one that tells what happened.
type firstError struct {
	w      imaging.BlockWriter
	err    error
	failed func(error)
}

func (f *firstError) WriteAt(p []byte, off int64) (int, error) {
	if f.err == nil {
		if _, err := f.w.WriteAt(p, off); err != nil {
			f.fail(err)
		}
	}
	return len(p), nil
}

func (f *firstError) ZeroRange(off, n int64) error {
	if f.err == nil {
		if err := f.w.ZeroRange(off, n); err != nil {
			f.fail(err)
		}
	}
	return nil
}

// LendBuffer lends the target's buffer (imaging.BufferLender), none once
// the target has failed.
func (f *firstError) LendBuffer() []byte {
	if f.err != nil {
		return nil
	}
	return imaging.LendFrom(f.w)
}

// ReturnBuffer returns it.
func (f *firstError) ReturnBuffer(b []byte) { imaging.ReturnTo(f.w, b) }

func (f *firstError) fail(err error) {
	f.err = err
	if f.failed != nil {
		f.failed(err)
	}
}

// receiveRaw writes the frames of a raw stream to w as they come.
func receiveRaw(src *frameSource, w imaging.BlockWriter, c *Counters) (imaging.Digest, error) {
	d := imaging.NewDigester()
	for {
		f, ok := src.next()
		if !ok {
			return d.Sum(), nil
		}
		switch f.Kind {
		case FrameData:
			if _, err := w.WriteAt(f.Payload, f.Offset); err != nil {
				return d.Sum(), err
			}
			// Verified: the digest need not read it again.
			if f.pieces == nil || !d.WriteSplitCRC(f.Payload, f.Offset, f.pieces) {
				d.WriteCRC(f.Payload, f.CRC)
			}
		case FrameZero:
			if err := w.ZeroRange(f.Offset, f.Length); err != nil {
				return d.Sum(), err
			}
			d.WriteZeros(f.Length)
		}
		c.Written.Add(f.Length)
	}
}

// decode decodes the payloads of a compressed stream and writes the raw
// bytes to w through a SparseWriter.
func decode(src *frameSource, h StreamHeader, w imaging.BlockWriter, c *Counters) (imaging.Digest, error) {
	d := imaging.NewDigester()
	var r io.Reader = src
	if h.Encoding != imaging.Zstd {
		// gzip reads a few bits at a time, fastest from a bufio.Reader;
		// zstd's decoder buffers what it needs itself.
		r = bufio.NewReaderSize(src, decodeBuffer)
	}
	dec, err := imaging.NewStreamDecoder(h.Encoding, r)
	if err != nil {
		return d.Sum(), fmt.Errorf("decoding %s stream: %w", h.Encoding, err)
	}
	defer dec.Close()
	sw := imaging.NewSparseWriter(w, d, h.ImageSize)
	// io.Copy lets the decoder write from its own window (WriteTo), which
	// spares a copy of every byte through a buffer of ours.
	out := &progressWriter{sw: sw, c: c}
	if _, err := io.Copy(out, dec); err != nil {
		if out.err != nil {
			return d.Sum(), out.err
		}
		return d.Sum(), fmt.Errorf("decoding %s stream: %w", h.Encoding, err)
	}
	if err := sw.Close(); err != nil {
		return d.Sum(), err
	}
	c.Written.Store(sw.Written())
	return d.Sum(), nil
}

// decodeBuffer is the buffer between the frames and a gzip decoder.
const decodeBuffer = 256 << 10

// progressWriter writes decoded bytes to the target and counts them.
type progressWriter struct {
	sw  *imaging.SparseWriter
	c   *Counters
	err error // the target's, as opposed to the decoder's
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.sw.Write(b)
	p.c.Written.Store(p.sw.Written())
	if err != nil {
		p.err = err
	}
	return n, err
}

// LendBuffer lends the target's buffer to the decoder
// (imaging.BufferLender).
func (p *progressWriter) LendBuffer() []byte { return p.sw.LendBuffer() }

// ReturnBuffer returns it.
func (p *progressWriter) ReturnBuffer(b []byte) { p.sw.ReturnBuffer(b) }

// WriteZeros takes a zero frame's run (imaging.ZeroWriter): it is zeroed,
// never decoded or scanned.
func (p *progressWriter) WriteZeros(n int64) error {
	err := p.sw.WriteZeros(n)
	p.c.Written.Store(p.sw.Written())
	if err != nil {
		p.err = err
	}
	return err
}
