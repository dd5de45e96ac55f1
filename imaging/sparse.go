package imaging

import "fmt"

// BlockWriter is what a raw image is written to: a Target, or anything
// else that can write at an offset and zero a range.
type BlockWriter interface {
	WriteAt(p []byte, off int64) (int, error)
	ZeroRange(off, n int64) error
}

// SparseWriter writes a raw image stream sequentially to a BlockWriter,
// zeroing runs of zeros instead of writing them, and feeds every byte to a
// Digester. It refuses to write past limit.
type SparseWriter struct {
	w      BlockWriter
	d      *Digester
	limit  int64
	off    int64  // image offset of buf[0]
	buf    []byte // pending bytes, flushed in whole chunks
	closed bool
	// A run of zeros not yet zeroed, carried from chunk to chunk.
	zeroOff, zeroLen int64
}

// sparseChunk is the unit SparseWriter scans and writes.
const sparseChunk = 1 << 20

// NewSparseWriter returns a SparseWriter at offset 0 of an image of limit bytes.
func NewSparseWriter(w BlockWriter, d *Digester, limit int64) *SparseWriter {
	return &SparseWriter{w: w, d: d, limit: limit, buf: make([]byte, 0, sparseChunk)}
}

// Write buffers p and writes every whole chunk.
func (s *SparseWriter) Write(p []byte) (int, error) {
	if s.off+int64(len(s.buf))+int64(len(p)) > s.limit {
		return 0, fmt.Errorf("image stream is longer than the announced %d bytes", s.limit)
	}
	n := len(p)
	if len(s.buf) == 0 && len(p) >= MinZeroRun && s.off%ZeroBlock == 0 {
		// Nothing pending: the whole blocks are scanned and written where
		// they lie (a decoder's window), not copied here first; the target
		// gathers them (directWriter). Only the tail is kept.
		whole := len(p) - len(p)%ZeroBlock
		if err := s.flushBytes(p[:whole], false); err != nil {
			return 0, err
		}
		p = p[whole:]
	}
	for len(p) > 0 {
		k := copy(s.buf[len(s.buf):cap(s.buf)], p)
		s.buf = s.buf[:len(s.buf)+k]
		p = p[k:]
		if len(s.buf) == cap(s.buf) {
			if err := s.flush(false); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// LendBuffer lends the target's buffer (BufferLender): what is decoded
// into it and written here reaches the target uncopied, where whole
// blocks of it are written at once (Write).
func (s *SparseWriter) LendBuffer() []byte { return LendFrom(s.w) }

// ReturnBuffer returns it, once written.
func (s *SparseWriter) ReturnBuffer(b []byte) { ReturnTo(s.w, b) }

// WriteZeros takes the next n bytes, all zero, as a run: a zstd stream's
// zero frame reaches it so (ZeroWriter). Whole blocks of the run join the
// run of zeros to zero; the rest goes through Write, as any other bytes.
func (s *SparseWriter) WriteZeros(n int64) error {
	if s.off+int64(len(s.buf))+n > s.limit {
		return fmt.Errorf("image stream is longer than the announced %d bytes", s.limit)
	}
	if len(s.buf) > 0 {
		// Up to a block boundary, then out with what is pending, so the
		// run starts on a boundary with nothing before it unwritten.
		pad := min(n, (ZeroBlock-(s.off+int64(len(s.buf)))%ZeroBlock)%ZeroBlock)
		if _, err := s.Write(zeroBlock[:pad]); err != nil {
			return err
		}
		n -= pad
		if n == 0 {
			return nil
		}
		if len(s.buf) > 0 {
			if err := s.flush(false); err != nil {
				return err
			}
		}
	}
	return s.writeZeroTail(n)
}

// writeZeroTail takes n zeros at s.off, where nothing is buffered and
// s.off is on a block boundary.
func (s *SparseWriter) writeZeroTail(n int64) error {
	whole := n - n%ZeroBlock
	if s.off+n == s.limit {
		whole = n // the image's last block, whole or not
	}
	// A short run goes as bytes, unless it goes on with the run before.
	if whole < MinZeroRun && (s.zeroLen == 0 || s.zeroOff+s.zeroLen != s.off) {
		return writeZeroBytes(s, n)
	}
	if s.zeroLen == 0 {
		s.zeroOff = s.off
	}
	s.zeroLen += whole
	s.d.WriteZeros(whole)
	s.off += whole
	if s.zeroLen >= maxZeroRange {
		if err := s.flushZeros(); err != nil {
			return err
		}
	}
	return writeZeroBytes(s, n-whole)
}

// Written is the image offset up to which bytes have reached the target
// (or are part of a run of zeros still to be zeroed).
func (s *SparseWriter) Written() int64 { return s.off }

// Close writes what is left. It fails when the stream ended short of limit.
func (s *SparseWriter) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.flush(true); err != nil {
		return err
	}
	if s.off != s.limit {
		return fmt.Errorf("image stream ended after %d of %d bytes", s.off, s.limit)
	}
	return nil
}

// maxZeroRange caps one ZeroRange call, so a huge run of zeros still
// reports progress as it goes.
const maxZeroRange = 256 << 20

func (s *SparseWriter) flush(eof bool) error {
	if err := s.flushBytes(s.buf, eof); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	return nil
}

// flushBytes writes b, the image's bytes at s.off, and moves s.off past
// them.
func (s *SparseWriter) flushBytes(b []byte, eof bool) error {
	var err error
	Segments(b, s.off, MinZeroRun, eof, func(seg Segment) {
		if err != nil {
			return
		}
		if seg.Zero {
			// Runs continue across chunks: zero them in one call each, as
			// a raw stream's zero frames do, not a call per chunk.
			if s.zeroLen == 0 {
				s.zeroOff = seg.Off
			}
			s.zeroLen += int64(seg.Len)
			s.d.WriteZeros(int64(seg.Len))
			if s.zeroLen >= maxZeroRange {
				err = s.flushZeros()
			}
			return
		}
		if err = s.flushZeros(); err != nil {
			return
		}
		p := b[seg.Off-s.off:][:seg.Len]
		_, err = s.w.WriteAt(p, seg.Off)
		s.d.Write(p)
	})
	if err == nil && eof {
		err = s.flushZeros()
	}
	if err != nil {
		return err
	}
	s.off += int64(len(b))
	return nil
}

// flushZeros zeroes the pending run of zeros.
func (s *SparseWriter) flushZeros() error {
	if s.zeroLen == 0 {
		return nil
	}
	err := s.w.ZeroRange(s.zeroOff, s.zeroLen)
	s.zeroLen = 0
	return err
}
