package status

import (
	"encoding/json"
	"sync"

	"dolly/server"
)

// A Hub takes a server's events (Publish, as server.Config.Events) and
// keeps the state they add up to for the page and the metrics. Publish
// never blocks: a watcher that is slow skips states, it never holds the
// cast back.
type Hub struct {
	mu      sync.Mutex
	state   State
	version uint64                     // bumped by every event
	waiters map[chan struct{}]struct{} // told of every new version
	closing chan struct{}              // closed by Close
	once    sync.Once
}

// NewHub returns a hub with no cast yet.
func NewHub() *Hub {
	return &Hub{state: newState(), waiters: map[chan struct{}]struct{}{}, closing: make(chan struct{})}
}

// Close ends every event stream once it has sent the state as it is now:
// a page open when the server stops shows how the cast ended.
func (h *Hub) Close() {
	h.once.Do(func() { close(h.closing) })
}

// Publish folds e into the state and wakes the watchers.
func (h *Hub) Publish(e server.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.apply(e)
	h.version++
	for w := range h.waiters {
		select {
		case w <- struct{}{}:
		default: // it has a wake-up pending already
		}
	}
}

// State is a copy of the state now.
func (h *Hub) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state.clone()
}

// encoded is the state's JSON and its version. It is encoded from a
// copy, so that Publish (which may run with the server's state locked)
// never waits for an encoding.
func (h *Hub) encoded() ([]byte, uint64, error) {
	h.mu.Lock()
	st, v := h.state.clone(), h.version
	h.mu.Unlock()
	b, err := json.Marshal(st)
	return b, v, err
}

// watch returns a channel that receives a value after each new version
// (several versions may fold into one), and a function that stops it.
func (h *Hub) watch() (<-chan struct{}, func()) {
	w := make(chan struct{}, 1)
	h.mu.Lock()
	h.waiters[w] = struct{}{}
	h.mu.Unlock()
	return w, func() {
		h.mu.Lock()
		delete(h.waiters, w)
		h.mu.Unlock()
	}
}
