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
	var (
		d    imaging.Digest
		end  End
		err  error
		sink frameSink
	)
	if h.Encoding == imaging.Raw {
		sink = &rawSink{w: fw, d: imaging.NewDigester(), c: c}
	} else {
		sink, err = newDecodingSink(h, fw, c)
		if err != nil {
			return d, end, err
		}
	}
	for {
		f, err := fr.Next()
		if err != nil {
			sink.abort(err)
			return d, end, err
		}
		if f.Kind == FrameEnd {
			end, err = ParseEnd(f.Payload)
			if err != nil {
				sink.abort(err)
				return d, end, err
			}
			break
		}
		if stored != nil && f.Kind == FrameData {
			if _, err := stored.Write(f.Payload); err != nil {
				sink.abort(err)
				return d, end, err
			}
		}
		if err := sink.frame(f); err != nil {
			sink.abort(err)
			return d, end, err
		}
		c.Stream.Add(int64(len(f.Payload)))
	}
	if hooks.EndSeen != nil {
		hooks.EndSeen()
	}
	d, err = sink.finish()
	if fw.err != nil {
		return d, end, fw.err
	}
	if err != nil {
		return d, end, err
	}
	if end.Size != h.ImageSize {
		return d, end, fmt.Errorf("end frame announces %d bytes, header %d", end.Size, h.ImageSize)
	}
	if d != end.Digest {
		return d, end, fmt.Errorf("%w (wrote %s, source %s)", ErrDigestMismatch, d.Short(), end.Digest.Short())
	}
	return d, end, nil
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

func (f *firstError) fail(err error) {
	f.err = err
	if f.failed != nil {
		f.failed(err)
	}
}

// frameSink is where verified frames go: straight to the target for raw
// streams, through a decoder for compressed ones.
type frameSink interface {
	frame(Frame) error
	finish() (imaging.Digest, error)
	abort(error)
}

type rawSink struct {
	w imaging.BlockWriter
	d *imaging.Digester
	c *Counters
}

func (s *rawSink) frame(f Frame) error {
	switch f.Kind {
	case FrameData:
		if _, err := s.w.WriteAt(f.Payload, f.Offset); err != nil {
			return err
		}
		s.d.WriteCRC(f.Payload, f.CRC) // verified: the digest need not read it again
	case FrameZero:
		if err := s.w.ZeroRange(f.Offset, f.Length); err != nil {
			return err
		}
		s.d.WriteZeros(f.Length)
	}
	s.c.Written.Add(f.Length)
	return nil
}

func (s *rawSink) finish() (imaging.Digest, error) { return s.d.Sum(), nil }
func (s *rawSink) abort(error)                     {}

// decodingSink feeds compressed payloads to a decoder running in its own
// goroutine, which writes the raw bytes through a SparseWriter.
type decodingSink struct {
	pw   *io.PipeWriter
	done chan struct{} // closed when the decoder has returned err
	err  error
	d    *imaging.Digester
}

// decodeBuffer is the buffer between the frames and the decoder.
const decodeBuffer = 256 << 10

func newDecodingSink(h StreamHeader, w imaging.BlockWriter, c *Counters) (*decodingSink, error) {
	pr, pw := io.Pipe()
	s := &decodingSink{pw: pw, done: make(chan struct{}), d: imaging.NewDigester()}
	go func() {
		// The decoder reads a few bytes at a time (a block's header, then
		// its body): from a buffer, rather than a hand-off through the pipe
		// for each, decoding costs a third less CPU.
		s.err = decode(bufio.NewReaderSize(pr, decodeBuffer), h, w, s.d, c)
		pr.CloseWithError(s.err) // unblocks a frame() waiting on the pipe
		close(s.done)
	}()
	return s, nil
}

func decode(r io.Reader, h StreamHeader, w imaging.BlockWriter, d *imaging.Digester, c *Counters) error {
	dec, err := imaging.NewStreamDecoder(h.Encoding, r)
	if err != nil {
		return fmt.Errorf("decoding %s stream: %w", h.Encoding, err)
	}
	defer dec.Close()
	sw := imaging.NewSparseWriter(w, d, h.ImageSize)
	// io.Copy lets the decoder write from its own window (WriteTo), which
	// spares a copy of every byte through a buffer of ours.
	out := &progressWriter{sw: sw, c: c}
	if _, err := io.Copy(out, dec); err != nil {
		if out.err != nil {
			return out.err
		}
		return fmt.Errorf("decoding %s stream: %w", h.Encoding, err)
	}
	if err := sw.Close(); err != nil {
		return err
	}
	c.Written.Store(sw.Written())
	return nil
}

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

func (s *decodingSink) frame(f Frame) error {
	if _, err := s.pw.Write(f.Payload); err != nil {
		<-s.done
		if s.err != nil {
			return s.err // the decoder's own error says more than the pipe's
		}
		return fmt.Errorf("decoder stopped early: %w", err)
	}
	return nil
}

func (s *decodingSink) finish() (imaging.Digest, error) {
	s.pw.Close()
	<-s.done
	if s.err != nil {
		return imaging.Digest{}, s.err
	}
	return s.d.Sum(), nil
}

func (s *decodingSink) abort(err error) {
	s.pw.CloseWithError(err)
	<-s.done
}
