package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// history keeps the most recent stream bytes a node has received, so that
// when a node further down dies, its children can resume from this node
// where they left off instead of from the start. Bytes enter at the end
// (fill, from the relay's local copy) and are read once by the node's own
// frame reader (Read); bytes already read stay until space is needed,
// unless a catch-up still holds them.
//
// Offsets are stream offsets: bytes after the stream header.
type history struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	// [start, end) are the bytes kept; read is where Read continues.
	start, end, read int64
	holds            map[*int64]struct{} // offsets catch-ups still need
	err              error               // how filling ended (io.EOF: cleanly)
	skipReads        bool                // the reader gave up: reading costs nothing
	ended            bool                // the reader verified the end frame
	waiting          bool                // the reader waits for bytes not yet here
}

// historySize is how far back a node can serve a child that lost its
// upstream: more than the bytes in flight over two hops.
const historySize = 32 << 20

func newHistory(size int) *history {
	h := &history{buf: make([]byte, size), holds: map[*int64]struct{}{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// floor is the oldest offset that must be kept. Called with mu held.
func (h *history) floor() int64 {
	f := h.read
	if h.skipReads {
		f = h.end
	}
	for p := range h.holds {
		f = min(f, *p)
	}
	return f
}

// fill copies src into the history until src ends; it waits while the
// history is full of bytes still needed. It returns src's error (nil at
// EOF) and ends the history with it.
func (h *history) fill(src io.Reader) error {
	size := int64(len(h.buf))
	for {
		h.mu.Lock()
		for h.end-h.floor() >= size && h.err == nil {
			h.cond.Wait()
		}
		if h.err != nil {
			h.mu.Unlock()
			return nil
		}
		// The next bytes go at the end, up to where the buffer wraps,
		// over bytes no one needs any more: give those up first.
		at := h.end % size
		k := min(size-(h.end-h.floor()), size-at)
		h.start = max(h.start, h.end+k-size)
		h.mu.Unlock()

		n, err := src.Read(h.buf[at : at+k])

		h.mu.Lock()
		h.end += int64(n)
		if err != nil {
			h.err = err
		}
		h.cond.Broadcast()
		h.mu.Unlock()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Read reads the next bytes for the node's frame reader.
func (h *history) Read(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.read == h.end && h.err == nil {
		h.waiting = true
		h.cond.Broadcast()
		h.cond.Wait()
		h.waiting = false
	}
	if h.read == h.end {
		return 0, h.err
	}
	n := h.copyOut(p, h.read)
	h.read += int64(n)
	h.cond.Broadcast()
	return n, nil
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
	stop := context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.cond.Broadcast()
		h.mu.Unlock()
	})
	defer stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for !h.ended && !(h.end >= pos && (h.skipReads || (h.waiting && h.read >= pos))) && ctx.Err() == nil {
		h.cond.Wait()
	}
	return h.ended
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
