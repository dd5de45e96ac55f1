package relay

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"
)

// history keeps the most recent stream bytes a node has received, so that
// when a node further down dies, its children can resume from this node
// where they left off instead of from the start. Bytes enter at the end
// (put, as the relay receives them) and are read once by the node's own
// frame reader (Lend, Read); bytes already read stay until space is needed,
// unless a catch-up still holds them.
//
// Offsets are stream offsets: bytes after the stream header.
type history struct {
	mu   sync.Mutex
	cond *sync.Cond
	// readable wakes the reader, only once the bytes it waits for are
	// here: a loan of a frame then costs one wake-up, not one per round.
	readable *sync.Cond
	buf      []byte
	// [start, end) are the bytes kept; read is where Read continues.
	start, end, read int64
	holds            map[*int64]struct{} // offsets catch-ups still need
	err              error               // how filling ended (io.EOF: cleanly)
	skipReads        bool                // the reader gave up: reading costs nothing
	ended            bool                // the reader verified the end frame
	waiting          bool                // the reader waits for bytes not yet here
	need             int64               // the offset a waiting reader needs bytes up to
	// yield has the reader hold off while the history has room (see
	// Relay.Yield); holding says it does so now; settling suspends yield
	// while the relay waits for the reader after its upstream stopped.
	yield, holding, settling bool
	// lent is the first byte lent to the reader and still in use (-1:
	// none); see Lend.
	lent  int64
	spare []byte // for a loan that cannot be made in place
	// observe sees each byte put, before the reader can (Config.Observe).
	observe func([]byte)
}

// HistoryBytes is how far back a node can serve a child that lost its
// upstream: more than the bytes in flight over two hops. It is also how far
// a node's link may run ahead of its own reading (the capacity model's
// Options.AheadBytes).
const HistoryBytes = 32 << 20

func newHistory(buf []byte) *history {
	h := &history{buf: buf, holds: map[*int64]struct{}{}, lent: -1}
	h.cond = sync.NewCond(&h.mu)
	h.readable = sync.NewCond(&h.mu)
	return h
}

// floor is the oldest offset that must be kept. Called with mu held.
func (h *history) floor() int64 {
	f := h.read
	if h.lent >= 0 {
		f = h.lent
	}
	if h.skipReads {
		f = h.end
	}
	for p := range h.holds {
		f = min(f, *p)
	}
	return f
}

// put appends the next stream bytes: read fills the slice it is given,
// at most limit bytes where the history has room, and says how many it
// filled. put waits while the history is full of bytes still needed.
func (h *history) put(limit int, read func([]byte) (int, error)) (int, error) {
	size := int64(len(h.buf))
	h.mu.Lock()
	for h.end-h.floor() >= size && h.err == nil {
		h.cond.Wait()
	}
	if h.err != nil {
		h.mu.Unlock()
		return 0, fmt.Errorf("history already ended: %w", h.err)
	}
	// The next bytes go at the end, up to where the buffer wraps, over
	// bytes no one needs any more: give those up first.
	at := h.end % size
	k := min(size-(h.end-h.floor()), size-at, int64(limit))
	h.start = max(h.start, h.end+k-size)
	h.mu.Unlock()

	n, err := read(h.buf[at : at+k])
	if h.observe != nil && n > 0 {
		h.observe(h.buf[at : at+int64(n)])
	}

	h.mu.Lock()
	h.end += int64(n)
	h.cond.Broadcast()
	if h.waiting && h.end >= h.need || h.holding && !h.held() {
		h.readable.Signal()
	}
	h.mu.Unlock()
	return n, err
}

// write appends p.
func (h *history) write(p []byte) error {
	for len(p) > 0 {
		n, err := h.put(len(p), func(b []byte) (int, error) { return copy(b, p), nil })
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// close ends the stream the history holds: err says how (nil: cleanly).
func (h *history) close(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = cmp.Or(err, io.EOF)
	}
	h.cond.Broadcast()
	h.readable.Broadcast()
}

// Read reads the next bytes for the node's frame reader.
func (h *history) Read(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lent = -1
	for h.held() {
		h.holdOff()
	}
	for h.read == h.end && h.err == nil {
		h.wait(h.read + 1)
	}
	if h.read == h.end {
		return 0, h.err
	}
	n := h.copyOut(p, h.read)
	h.read += int64(n)
	h.cond.Broadcast()
	return n, nil
}

// Lend returns the next n bytes for the node's frame reader where they lie
// in the history, without copying them, and keeps them until the next Read
// or Lend. Bytes that wrap around the end of the history are copied.
func (h *history) Lend(n int) ([]byte, error) {
	h.mu.Lock()
	h.lent = -1
	size := int64(len(h.buf))
	at := h.read % size
	if int64(n) > size/2 || at+int64(n) > size {
		h.mu.Unlock()
		if cap(h.spare) < n {
			h.spare = make([]byte, n)
		}
		b := h.spare[:n]
		_, err := io.ReadFull(h, b)
		return b, err
	}
	defer h.mu.Unlock()
	for h.held() {
		h.holdOff()
	}
	for h.end-h.read < int64(n) && h.err == nil {
		h.wait(h.read + int64(n))
	}
	if h.end-h.read < int64(n) {
		if h.err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, h.err
	}
	h.lent = h.read
	h.read += int64(n)
	h.cond.Broadcast()
	return h.buf[at : at+int64(n)], nil
}

// wait waits, as the reader, for bytes up to need. Called with mu held.
func (h *history) wait(need int64) {
	h.waiting, h.need = true, need
	h.cond.Broadcast() // for waitSettled
	h.readable.Wait()
	h.waiting = false
}

// YieldRoom is the room a yielding reader leaves in the history: it reads
// once less than this is free, so that what comes in never waits for it.
const YieldRoom = 4 << 20

// held reports whether the reader holds off: it yields, the stream goes
// on, and the history has more than yieldRoom free. Called with mu held.
func (h *history) held() bool {
	return h.yield && !h.settling && h.err == nil && int64(len(h.buf))-(h.end-h.floor()) > YieldRoom
}

// holdOff waits, as the reader, until it need not hold off any more.
// Called with mu held.
func (h *history) holdOff() {
	h.holding = true
	h.cond.Broadcast() // for tests that wait for it
	h.readable.Wait()
	h.holding = false
}

// setYield has the reader hold off while the history has room, or read as
// the bytes come.
func (h *history) setYield(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.yield = on
	h.readable.Broadcast()
}

// copyOut copies bytes from offset off into p, up to the end or the wrap.
// Called with mu held.
func (h *history) copyOut(p []byte, off int64) int {
	at := int(off % int64(len(h.buf)))
	n := min(len(p), int(h.end-off), len(h.buf)-at)
	return copy(p[:n], h.buf[at:at+n])
}

// stopReading tells the history that the node's reader is gone (its disk
// failed); bytes are then kept only for catch-ups.
func (h *history) stopReading() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.skipReads = true
	h.cond.Broadcast()
}

// markEnd records that the reader verified the end frame.
func (h *history) markEnd() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	h.cond.Broadcast()
}

// waitSettled waits, after the upstream stopped at offset pos, until the
// reader either verified the end frame (true: the stream is complete) or
// read everything up to pos and waits for more (false: the stream was cut
// short). A reader that gave up (stopReading) cannot tell: the stream is
// then taken as cut short unless the end was marked.
func (h *history) waitSettled(ctx context.Context, pos int64) bool {
	defer h.wakeWhenDone(ctx)()
	h.mu.Lock()
	defer h.mu.Unlock()
	// Nothing more comes for now: a yielding reader reads what is here,
	// and yields again once a new upstream sends.
	h.settling = true
	h.readable.Broadcast()
	defer func() { h.settling = false }()
	for !h.ended && !(h.end >= pos && (h.skipReads || (h.waiting && h.need > pos))) && ctx.Err() == nil {
		h.cond.Wait()
	}
	return h.ended
}

// wakeWhenDone wakes every waiter on cond once ctx is done, so that a wait
// can end with ctx; the function it returns stops that.
func (h *history) wakeWhenDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.cond.Broadcast()
		h.mu.Unlock()
	})
}

// waitEnd waits until the history holds the stream up to offset pos, or
// filling ended.
func (h *history) waitEnd(pos int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.end < pos && h.err == nil {
		h.cond.Wait()
	}
	if h.end < pos {
		return fmt.Errorf("history ended at %d before %d: %w", h.end, pos, h.err)
	}
	return nil
}

// hold keeps the bytes from off onward until release is called, and
// reports whether they are still here.
func (h *history) hold(off int64) (release func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off < h.start || off > h.end {
		return nil, false
	}
	p := &off
	h.holds[p] = struct{}{}
	return func() {
		h.mu.Lock()
		delete(h.holds, p)
		h.cond.Broadcast()
		h.mu.Unlock()
	}, true
}

// writeRange writes the stream bytes [from, to) to w; they must be held.
func (h *history) writeRange(w io.Writer, from, to int64) error {
	chunk := make([]byte, 256<<10)
	for from < to {
		h.mu.Lock()
		if from < h.start {
			h.mu.Unlock()
			return fmt.Errorf("history no longer holds offset %d", from)
		}
		n := h.copyOut(chunk[:min(int64(len(chunk)), to-from)], from)
		h.mu.Unlock()
		if _, err := w.Write(chunk[:n]); err != nil {
			return err
		}
		from += int64(n)
	}
	return nil
}

// bounds reports the bytes held, for tests and diagnostics.
func (h *history) bounds() (start, end int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.start, h.end
}
