package imaging

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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
	return AlignIn(make([]byte, n+DirectAlign), n)
}

// AlignIn returns n bytes of b whose first byte is DirectAlign-aligned, the
// first such bytes in b, or nil if b cannot hold them.
func AlignIn(b []byte, n int) []byte {
	if n <= 0 || len(b) < n {
		return nil
	}
	off := 0
	if rem := int(sliceAddr(b) % DirectAlign); rem != 0 {
		off = DirectAlign - rem
	}
	if off+n > len(b) {
		return nil
	}
	return b[off : off+n : off+n]
}

// directWriter gathers sequential writes into aligned chunks and writes
// them through a descriptor opened with O_DIRECT. A cast writes each byte
// once and never reads it back: through the page cache it would be copied
// in, written back by kernel threads and evicted again, which costs the
// CPU several times what one aligned copy does. The unaligned edges of a
// run (its first and last partial blocks) go through the cached descriptor.
//
// A direct write, or a zeroing, returns only once the disk is done, so the
// writer hands its chunks and zero ranges to a goroutine of its own that
// works through them in order, while the caller (a node's decoder) goes on
// filling the next chunk: a cast runs at the slower of the two, not at
// their sum. A few chunks at most are queued; a failure is reported by
// the next call, and by every one after it.
type directWriter struct {
	direct *os.File // the target opened with O_DIRECT
	cached *os.File // the same target, cached
	buf    []byte   // aligned; buf[i] holds image byte base+i
	base   int64    // image offset of buf[0], aligned
	// Pending bytes are buf[start:end].
	start, end int

	ops     chan diskOp   // to the disk goroutine, in order
	free    chan []byte   // chunks written and free again
	done    chan struct{} // closed when the disk goroutine has returned
	queued  int           // ops sent and not yet acknowledged
	chunks  int           // chunks allocated, buf included
	acks    chan error    // one per op, with its result
	err     error         // the first failure, reported from then on
	refused atomic.Bool   // the target refused O_DIRECT: all goes cached

	// Buffers lent to a decoder (BufferLender): lent is the one out, whose
	// slices writeAt queues where they lie. A returned one goes into the
	// disk's queue behind the writes from it, and then to spare.
	lent     []byte
	spare    chan []byte
	lentMade int
	uncopied int64 // bytes queued from lent buffers where they lay

	// mu serialises the callers: a node may close its target while its
	// receiver, stopped by the same failure, still writes.
	mu     sync.Mutex
	closed bool
}

// diskOp is one operation for the disk goroutine.
type diskOp struct {
	do    func() error // nil: only returns lent
	chunk []byte       // returned to free once done
	lent  []byte       // returned to spare once done
}

// directQueue is how many operations may wait for the disk before a write
// or a zeroing waits. A returned lent buffer's counts, without waiting:
// the decoder then runs one frame (2 MiB) ahead of the disk, as far as
// two gathered chunks. Letting it run a frame further cost 5-14% more CPU
// a byte (BenchmarkReceiveToDisk, paired runs): the buffer decoded into
// next is then one used longer ago, out of the caches.
const directQueue = 2

// maxLent is how many buffers a writer lends at most: the one a decoder
// fills, and those the queued writes are written from.
const maxLent = directQueue + 1

// minLentWrite is the least of a lent buffer that goes to the disk where
// it lies; less is gathered with what comes next, as small direct writes
// keep a disk from streaming.
const minLentWrite = 128 << 10

func newDirectWriter(direct, cached *os.File) *directWriter {
	// A returned lent buffer goes into the queue past directQueue, one at
	// most for each: the queue and the acks have room for those too.
	w := &directWriter{direct: direct, cached: cached, buf: AlignedBuffer(directChunk),
		ops: make(chan diskOp, directQueue+maxLent), free: make(chan []byte, directQueue+1),
		acks: make(chan error, directQueue+maxLent+2), done: make(chan struct{}), chunks: 1,
		spare: make(chan []byte, maxLent)}
	go w.disk()
	return w
}

// disk works through the queued operations in order.
func (w *directWriter) disk() {
	defer close(w.done)
	var failed error
	for op := range w.ops {
		if failed == nil && op.do != nil {
			failed = op.do()
		}
		if op.chunk != nil {
			w.free <- op.chunk
		}
		if op.lent != nil {
			// Every write from it, queued before, is done.
			w.spare <- op.lent
		}
		w.acks <- failed
	}
}

// send queues op, first collecting the results of those already done.
func (w *directWriter) send(op diskOp) error {
	w.collect(false)
	if w.err != nil {
		// The disk goroutine skips what is queued after a failure: what
		// the op holds is free now.
		if op.chunk != nil {
			w.free <- op.chunk
		}
		return w.err
	}
	for op.do != nil && w.queued >= directQueue {
		w.collect(true)
	}
	w.queued++
	w.ops <- op
	return nil
}

// collect takes in the results of finished operations; with wait, it waits
// for at least one.
func (w *directWriter) collect(wait bool) {
	for w.queued > 0 {
		var err error
		if wait {
			err = <-w.acks
			wait = false
		} else {
			select {
			case err = <-w.acks:
			default:
				return
			}
		}
		w.queued--
		if w.err == nil {
			w.err = err
		}
	}
}

// drain waits until the disk has done everything queued.
func (w *directWriter) drain() error {
	for w.queued > 0 {
		w.collect(true)
	}
	return w.err
}

// writeAt queues p for image offset off, handing chunks to the disk as
// they fill.
func (w *directWriter) writeAt(p []byte, off int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return os.ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if chunk, start, ok := w.inLent(p, off); ok {
		// Written from where it lies, after what was gathered before it.
		if err := w.queueBuffer(); err != nil {
			return err
		}
		base, end := off-int64(start), start+len(p)
		w.uncopied += int64(len(p))
		return w.send(diskOp{do: func() error {
			if err := w.write(chunk, base, start, end); err != nil {
				return fmt.Errorf("target %s: writing at offset %d: %w", w.cached.Name(), off, unwrapPathError(err))
			}
			return nil
		}})
	}
	if w.end > w.start && off != w.base+int64(w.end) {
		if err := w.queueBuffer(); err != nil {
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
			next := w.base + int64(len(w.buf))
			if err := w.queueBuffer(); err != nil {
				return err
			}
			w.base = next
		}
	}
	return nil
}

// inLent reports whether p, the image's bytes at off, can go to the disk
// from the lent buffer it lies in: it is large enough and its memory
// aligned as its offset is. chunk[start:] is p, and chunk[0] lies on a
// block boundary of the image.
func (w *directWriter) inLent(p []byte, off int64) (chunk []byte, start int, ok bool) {
	if w.lent == nil || len(p) < minLentWrite {
		return nil, 0, false
	}
	lo, hi := sliceAddr(w.lent), sliceAddr(w.lent)+uintptr(cap(w.lent))
	at := sliceAddr(p)
	if at < lo || at+uintptr(len(p)) > hi {
		return nil, 0, false
	}
	start = int(off % DirectAlign)
	pos := int(at - lo)
	if (pos-start)%DirectAlign != 0 {
		return nil, 0, false
	}
	return w.lent[pos-start : pos+len(p)], start, true
}

// LendBuffer lends an aligned buffer (BufferLender), or nil once writes
// go through the page cache. It waits for one to come back from the disk
// when all are out.
func (w *directWriter) LendBuffer() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.err != nil || w.lent != nil || !w.isDirect() {
		return nil
	}
	select {
	case w.lent = <-w.spare:
	default:
		if w.lentMade < maxLent {
			w.lent = AlignIn(make([]byte, LentSize+lentSlack+DirectAlign), LentSize+lentSlack)
			w.lentMade++
		} else {
			w.lent = <-w.spare
		}
	}
	return w.lent
}

// ReturnBuffer takes back the lent buffer: it is lent again once the
// writes queued from it are done.
func (w *directWriter) ReturnBuffer(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lent == nil || unsafe.SliceData(b) != unsafe.SliceData(w.lent) {
		return
	}
	lent := w.lent
	w.lent = nil
	switch {
	case w.closed:
	case w.err != nil:
		// The disk goroutine skips what is queued after a failure: no
		// write from it is left to run.
		w.spare <- lent
	default:
		// Behind the writes from it.
		w.queued++
		w.ops <- diskOp{lent: lent}
	}
}

// queueBuffer hands the pending bytes to the disk and takes a free chunk.
func (w *directWriter) queueBuffer() error {
	if w.end == w.start {
		return nil
	}
	chunk, base, start, end := w.buf, w.base, w.start, w.end
	select {
	case w.buf = <-w.free:
	default:
		if w.chunks < directQueue+1 {
			w.buf = AlignedBuffer(directChunk)
			w.chunks++
		} else {
			// Every other chunk is queued: one comes back.
			w.buf = <-w.free
		}
	}
	w.start, w.end = 0, 0
	return w.send(diskOp{chunk: chunk, do: func() error {
		if err := w.write(chunk, base, start, end); err != nil {
			return fmt.Errorf("target %s: writing at offset %d: %w", w.cached.Name(), base+int64(start), unwrapPathError(err))
		}
		return nil
	}})
}

// zero queues zeroing [off, off+n) with fn, after every byte before it.
func (w *directWriter) zero(fn func() error) error {
	return w.afterPending(func() error { return w.send(diskOp{do: fn}) })
}

// flush writes every pending byte and waits for the disk.
func (w *directWriter) flush() error {
	return w.afterPending(w.drain)
}

// afterPending queues the buffered bytes, then does then, both under the
// writer's lock.
func (w *directWriter) afterPending(then func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return os.ErrClosed
	}
	if err := w.queueBuffer(); err != nil {
		return err
	}
	return then()
}

// write writes chunk[start:end], image bytes from base+start: the aligned
// middle directly, the partial blocks at either end through the cache.
func (w *directWriter) write(chunk []byte, base int64, start, end int) error {
	lo := (start + DirectAlign - 1) / DirectAlign * DirectAlign
	hi := end / DirectAlign * DirectAlign
	if lo >= hi {
		lo, hi = end, end // no whole block: all of it cached
	}
	if lo > start {
		if _, err := w.cached.WriteAt(chunk[start:lo], base+int64(start)); err != nil {
			return err
		}
	}
	if hi > lo {
		if err := w.writeDirect(chunk[lo:hi], base+int64(lo)); err != nil {
			return err
		}
	}
	if end > hi {
		if _, err := w.cached.WriteAt(chunk[hi:end], base+int64(hi)); err != nil {
			return err
		}
	}
	return nil
}

// writeDirect writes aligned bytes with O_DIRECT, or through the cache once
// the target has refused O_DIRECT (some drivers and file systems do).
func (w *directWriter) writeDirect(p []byte, off int64) error {
	if w.direct != nil && !w.refused.Load() {
		_, err := w.direct.WriteAt(p, off)
		if !errors.Is(err, errDirectRefused) {
			return err
		}
		w.refused.Store(true)
	}
	_, err := w.cached.WriteAt(p, off)
	return err
}

// isDirect reports whether writes still bypass the page cache.
func (w *directWriter) isDirect() bool { return w.direct != nil && !w.refused.Load() }

// close stops the disk goroutine once it is done, and closes the direct
// descriptor; flush first to know the bytes were written.
func (w *directWriter) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.drain()
	close(w.ops)
	<-w.done
	if w.direct == nil {
		return nil
	}
	return w.direct.Close()
}

func sliceAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
