package imaging

import (
	"errors"
	"os"
	"unsafe"
)

// DirectAlign is the alignment of direct writes: of the memory, the offset
// and the length. 4 KiB suits disks with 512-byte and 4 KiB sectors alike.
const DirectAlign = 4096

// directChunk is how much a direct writer gathers before it writes. Without
// the page cache queueing writes behind it, big writes are what keep a disk
// streaming.
const directChunk = 1 << 20

// AlignedBuffer returns n bytes whose first byte is DirectAlign-aligned, as
// O_DIRECT requires.
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+DirectAlign)
	off := 0
	if rem := int(sliceAddr(b) % DirectAlign); rem != 0 {
		off = DirectAlign - rem
	}
	return b[off : off+n : off+n]
}

// directWriter gathers sequential writes into aligned chunks and writes
// them through a descriptor opened with O_DIRECT. A cast writes each byte
// once and never reads it back: through the page cache it would be copied
// in, written back by kernel threads and evicted again, which costs the
// CPU several times what one aligned copy does. The unaligned edges of a
// run (its first and last partial blocks) go through the cached descriptor.
type directWriter struct {
	direct *os.File // the target opened with O_DIRECT
	cached *os.File // the same target, cached
	buf    []byte   // aligned; buf[i] holds image byte base+i
	base   int64    // image offset of buf[0], aligned
	// Pending bytes are buf[start:end].
	start, end int
}

func newDirectWriter(direct, cached *os.File) *directWriter {
	return &directWriter{direct: direct, cached: cached, buf: AlignedBuffer(directChunk)}
}

// writeAt queues p for image offset off, writing whole chunks as they fill.
func (w *directWriter) writeAt(p []byte, off int64) error {
	if w.end > w.start && off != w.base+int64(w.end) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	if w.end == w.start {
		w.base = off / DirectAlign * DirectAlign
		w.start = int(off - w.base)
		w.end = w.start
	}
	for len(p) > 0 {
		k := copy(w.buf[w.end:], p)
		w.end += k
		p = p[k:]
		if w.end == len(w.buf) {
			if err := w.flush(); err != nil {
				return err
			}
			w.base += int64(len(w.buf))
			w.start, w.end = 0, 0
		}
	}
	return nil
}

// flush writes every pending byte: the aligned middle directly, the
// partial blocks at either end through the cache.
func (w *directWriter) flush() error {
	if w.end == w.start {
		return nil
	}
	lo := (w.start + DirectAlign - 1) / DirectAlign * DirectAlign
	hi := w.end / DirectAlign * DirectAlign
	if lo >= hi {
		lo, hi = w.end, w.end // no whole block: all of it cached
	}
	if lo > w.start {
		if _, err := w.cached.WriteAt(w.buf[w.start:lo], w.base+int64(w.start)); err != nil {
			return err
		}
	}
	if hi > lo {
		if err := w.writeDirect(w.buf[lo:hi], w.base+int64(lo)); err != nil {
			return err
		}
	}
	if w.end > hi {
		if _, err := w.cached.WriteAt(w.buf[hi:w.end], w.base+int64(hi)); err != nil {
			return err
		}
	}
	w.start, w.end = 0, 0
	return nil
}

// writeDirect writes aligned bytes with O_DIRECT, or through the cache once
// the target has refused O_DIRECT (some drivers and file systems do).
func (w *directWriter) writeDirect(p []byte, off int64) error {
	if w.direct != nil {
		_, err := w.direct.WriteAt(p, off)
		if !errors.Is(err, errDirectRefused) {
			return err
		}
		w.direct.Close()
		w.direct = nil
	}
	_, err := w.cached.WriteAt(p, off)
	return err
}

func (w *directWriter) close() error {
	if w.direct == nil {
		return nil
	}
	return w.direct.Close()
}

func sliceAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
