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
	var err error
	Segments(s.buf, s.off, MinZeroRun, eof, func(seg Segment) {
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
		p := s.buf[seg.Off-s.off:][:seg.Len]
		_, err = s.w.WriteAt(p, seg.Off)
		s.d.Write(p)
	})
	if err == nil && eof {
		err = s.flushZeros()
	}
	if err != nil {
		return err
	}
	s.off += int64(len(s.buf))
	s.buf = s.buf[:0]
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
