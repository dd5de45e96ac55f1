// Package relay forwards a node's stream verbatim to its children and keeps
// the node's own copy in a history that its frame reader reads and that
// serves children that join late or lose their upstream.
package relay

import (
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Relay forwards a node's stream verbatim to its children and keeps the
// node's own copy in a history that its frame reader reads (Reader) and
// that serves children that join late or lose their upstream.
//
// The upstream and the children can change while the stream flows: a node
// whose upstream died gets a new one (SetUpstream) and goes on from the
// byte it had reached; a child that lost its upstream is attached here
// (Attach) from the byte it had reached, served from the history first.
//
// On Linux, TCP streams move with splice(2) and tee(2): forwarding costs no
// user-space copy. Elsewhere, and with NoSplice, bytes are copied.
//
// Its endings, each one word: the stream has *ended* once its upstream
// closed after the end frame; it is *delivered* once every child was sent
// all of it (Drained); the relay has *stopped* once Run has returned. A
// child is *finished* once its connection was half-closed or closed.
type Relay struct {
	hist     *history // the node's copy of the stream
	zeroCopy bool
	// teeLimit, when set, caps each tee so tests can exercise the
	// short-tee path that the kernel takes only rarely.
	teeLimit int
	// deliveryStall is how long a finished child may acknowledge nothing
	// before the relay stops waiting for it to have the whole stream.
	deliveryStall time.Duration

	reqs chan relayRequest
	// pending counts requests on their way to the loop: a loop woken for
	// one waits for it rather than going back to an idle upstream.
	pending atomic.Int64
	given   chan struct{} // a pending request was given up
	events  chan Event
	stopped chan struct{} // closed when Run returns
	// delivered is closed once the stream has ended and every child had
	// it; late counts children attached afterwards that are still served.
	delivered  chan struct{}
	late       sync.WaitGroup
	serveLate  bool   // see Config.ServeLate
	spoolDir   string // see Config.SpoolDir
	spoolLimit int64  // see Config.SpoolLimit

	mu  sync.Mutex
	up  Upstream // the current upstream, to wake the loop on a request
	pos atomic.Int64
	// starved is how long, in all, the loop waited for its upstream's
	// data (nanoseconds), and starving when the wait going on began (0:
	// none).
	starved, starving atomic.Int64
	ended             bool // the stream ended; new children get the rest and an end
	// named are the children by name, for Detach to cut off a child that
	// holds the loop up because it does not read.
	named map[string]*relayChild

	// Owned by the loop.
	children []*relayChild
	sp       *spliceState
	copyBuf  []byte
}

// Upstream is what a relay reads from: a TCP connection, or the source's
// pipe from its encoder.
type Upstream interface {
	io.ReadCloser
	syscall.Conn
	SetReadDeadline(time.Time) error
}

// Event tells the node what happened to its data path.
type Event struct {
	Kind EventKind
	Name string // the child concerned
	Err  error
	Pos  int64 // stream bytes received when the upstream was lost
}

// EventKind names an Event.
type EventKind int

const (
	ChildLost    EventKind = iota // a child's connection failed; it was dropped
	UpstreamLost                  // the upstream ended before the end of the stream
)

// pipeSize is the capacity asked of every pipe: one splice moves at most
// a quarter of it, and it bounds how far a relay runs ahead of a child.
// Larger pipes save no CPU: with 4 MiB (rounds of 1 MiB) the emulated
// lab's raw chain of 8 at 1 Gbit/s took 6.9 CPU-s of its nodes and ran at
// 308 MB/s, where 1 MiB took 5.3-6.4 CPU-s and ran at 308-378 MB/s over
// five runs of the same hour; 512 KiB measured neither better nor worse.
const pipeSize = 1 << 20

// roundSize is the most one round moves in copy mode.
const roundSize = 256 << 10

// Config says how a relay runs.
type Config struct {
	// NoSplice forwards with user-space copies even where splice works, to
	// compare the two or to work around a kernel that misbehaves.
	NoSplice bool
	// NoLocalCopy says this host reads no copy of the stream (the source
	// has no disk to write): the history then only serves children.
	NoLocalCopy bool
	// ServeLate keeps the relay serving children that come late from its
	// history after the stream has ended, until Run's context ends: a
	// child whose upstream died near the end still gets the rest.
	ServeLate bool
	// DeliveryStall is how long a finished child may acknowledge nothing
	// before the relay stops waiting for it to have the whole stream;
	// default 30 s, as a disk pausing for a few seconds is normal.
	DeliveryStall time.Duration
	// SpoolDir is where paced children's spools go (see AttachPaced); the
	// system's temporary directory if empty.
	SpoolDir string
	// SpoolLimit bounds what one paced child may lag behind, in bytes;
	// 0: half the room on the spool's file system when it is made.
	SpoolLimit int64
	// HistorySize is how many bytes back the relay can serve a child; 0
	// is the default, more than two hops hold in flight. Only a relay
	// that serves no failures, a probe's, should take less.
	HistorySize int
	// History is memory for the history from NewHistory, made before the
	// cast (and perhaps used by a relay that has stopped: a probe's). Its
	// length is the history's size; nil allocates HistorySize bytes.
	History []byte
	// WakeDelay is how much of its upstream's stream the relay gathers
	// before it wakes, in time at the rate the upstream delivers it (see
	// wakeSize); 0 is wakeDelay. A node of a crowded machine whose cores
	// hold the cast back takes CrowdedWakeDelay, as the server tells it.
	WakeDelay time.Duration
	// Observe, if set, sees every stream byte once, in order, as it
	// enters the history and before the node's reader can have it: while
	// it is still in the CPU's cache (see stream.PayloadSums). It runs on
	// the relay's goroutine, so it must be quick.
	Observe func(p []byte)
}

// NewHistory returns memory for a relay's history of the default size, for
// Config.History, with its pages mapped. A fresh page costs a fault when
// first written, which a virtual machine's host may have to back first:
// 32 MiB took from 0.4 to 590 ms on a VM, the fastest casts' whole CPU
// time. Made while the cast is being set up, the history costs the cast
// nothing.
func NewHistory() []byte {
	b := make([]byte, HistoryBytes)
	page := os.Getpagesize()
	for i := 0; i < len(b); i += page {
		b[i] = 0
	}
	return b
}

// New makes a relay with no upstream and no children yet.
func New(cfg Config) (*Relay, error) {
	buf := cfg.History
	if buf == nil {
		buf = make([]byte, cmp.Or(cfg.HistorySize, HistoryBytes))
	}
	r := &Relay{
		hist:       newHistory(buf),
		zeroCopy:   !cfg.NoSplice && spliceSupported,
		serveLate:  cfg.ServeLate,
		spoolDir:   cfg.SpoolDir,
		spoolLimit: cfg.SpoolLimit,
		reqs:       make(chan relayRequest),
		given:      make(chan struct{}, 1),
		events:     make(chan Event, 64),
		stopped:    make(chan struct{}),
		delivered:  make(chan struct{}),
		named:      map[string]*relayChild{},

		deliveryStall: cmp.Or(cfg.DeliveryStall, defaultDeliveryStall),
	}
	if r.zeroCopy {
		var err error
		if r.sp, err = newSpliceState(cfg.WakeDelay); err != nil {
			return nil, err
		}
	}
	r.hist.observe = cfg.Observe
	if cfg.NoLocalCopy {
		r.hist.stopReading()
	}
	return r, nil
}

// ZeroCopy reports whether the relay forwards without user-space copies.
func (r *Relay) ZeroCopy() bool { return r.zeroCopy }

// Pos is the number of stream bytes received so far (after the header).
func (r *Relay) Pos() int64 { return r.pos.Load() }

// Starved is how long, in all, the relay waited for its upstream to send
// more: the other side of Held. A relay whose upstream's link (or its
// own, inbound) is slow waits here; one held back by a child does not.
func (r *Relay) Starved() time.Duration {
	// As relayChild.heldNow: waiting first, so that a wait that ends in
	// between counts once.
	w := r.starving.Load()
	d := r.starved.Load()
	if w != 0 && r.starving.Load() == w {
		d += time.Now().UnixNano() - w
	}
	return time.Duration(d)
}

// Reader is the node's own copy of the stream, for its frame reader. The
// node must keep reading it, or the relay stalls once the history is full.
func (r *Relay) Reader() io.Reader { return r.hist }

// Yield has the node's reader hold off while the relay's history has room:
// the node's decoding and writing then wait, as the history fills, for the
// machine's cores that others need more, while its link and its children
// get the stream as it comes. Yield(false) lets it read on at once; so does
// the end of the stream, and an upstream that stops, until another sends.
func (r *Relay) Yield(on bool) { r.hist.setYield(on) }

// EndSeen tells the relay that the node's frame reader verified the end
// frame: an upstream that closes now has finished, not failed.
func (r *Relay) EndSeen() { r.hist.markEnd() }

// DropLocalCopy tells the relay the node no longer reads its copy (its
// disk failed); the relay goes on forwarding and keeps history for
// children.
func (r *Relay) DropLocalCopy() { r.hist.stopReading() }

// Events reports what happens to the data path. It is buffered; a slow
// reader misses nothing that matters, as the server learns of failures on
// its own too.
func (r *Relay) Events() <-chan Event { return r.events }

func (r *Relay) emit(e Event) {
	select {
	case r.events <- e:
	default:
	}
}

// Drained waits until the stream has ended and every child, including
// ones attached late, has been sent all of it.
func (r *Relay) Drained(ctx context.Context) error {
	select {
	case <-r.delivered:
	case <-r.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan struct{})
	go func() { r.late.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run relays until the stream has ended and every child has it, or ctx is
// done. Children then get a clean end of stream (half-close); on any other
// return their connections are closed.
func (r *Relay) Run(ctx context.Context) (err error) {
	defer close(r.stopped)
	defer func() {
		r.mu.Lock()
		if r.up != nil {
			r.up.Close()
		}
		r.mu.Unlock()
		clean := err == nil
		for _, ch := range r.children {
			ch.finish(clean)
		}
		r.hist.close(nil)
		if r.sp != nil {
			r.sp.close()
		}
	}()
	stop := context.AfterFunc(ctx, r.wake)
	defer stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.takeRequests(ctx)
		r.mu.Lock()
		up := r.up
		r.mu.Unlock()
		if up == nil {
			select {
			case q := <-r.reqs:
				r.handle(ctx, q)
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		waited := time.Now()
		r.starving.Store(waited.UnixNano())
		n, rerr := r.readRound(up)
		r.starved.Add(int64(time.Since(waited)))
		r.starving.Store(0)
		if n > 0 {
			if err := r.distribute(n); err != nil {
				return err
			}
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			up.SetReadDeadline(time.Time{}) // woken for a request
			if err := r.awaitPending(ctx); err != nil {
				return err
			}
		default:
			// The upstream ended. Either the stream is complete, or it was
			// cut short and a new upstream will take over.
			if r.hist.waitSettled(ctx, r.pos.Load()) {
				if err := r.drain(ctx); err != nil {
					return err
				}
				if !r.serveLate {
					for _, ch := range r.children {
						ch.finish(true) // before Drained says they have it
					}
					close(r.delivered)
					return nil
				}
				r.serveLateChildren(ctx, up)
				return nil
			}
			r.mu.Lock()
			r.up = nil
			r.mu.Unlock()
			up.Close()
			r.emit(Event{Kind: UpstreamLost, Pos: r.pos.Load(), Err: rerr})
		}
	}
}

// serveLateChildren finishes the children that have everything and serves those
// attached afterwards from the history, until ctx ends.
func (r *Relay) serveLateChildren(ctx context.Context, up Upstream) {
	r.mu.Lock()
	r.up = nil
	r.ended = true
	r.mu.Unlock()
	up.Close()
	// Each child's end is delivered on its own: one slow to acknowledge
	// holds neither the others nor the requests this loop takes.
	for _, ch := range r.children {
		r.finishLate(ctx, ch)
	}
	r.children = nil
	close(r.delivered)
	for {
		select {
		case q := <-r.reqs:
			r.handle(ctx, q)
		case <-ctx.Done():
			return
		}
	}
}

// finishLate ends a child's stream on its own goroutine, which Drained
// waits for; ctx ending cuts it short.
func (r *Relay) finishLate(ctx context.Context, ch *relayChild) {
	r.late.Add(1)
	go func() {
		defer r.late.Done()
		stop := context.AfterFunc(ctx, ch.cut)
		defer stop()
		ch.finish(true)
	}()
}

// distribute hands a round of n bytes to every child and the local copy.
func (r *Relay) distribute(n int) error {
	live := r.children[:0]
	for _, ch := range r.children {
		if ch.dead.Load() {
			if !ch.detached.Load() {
				r.emit(Event{Kind: ChildLost, Name: ch.name, Err: ch.err})
			}
			ch.finish(false)
			continue
		}
		live = append(live, ch)
	}
	r.children = live
	var err error
	if r.zeroCopy {
		err = r.distributeSplice(n)
	} else {
		err = r.distributeCopy(n)
	}
	if err != nil {
		return err
	}
	r.pos.Add(int64(n))
	return nil
}

// drain waits until every child has been sent everything.
func (r *Relay) drain(ctx context.Context) error {
	for _, ch := range r.children {
		if err := ch.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// readRound reads the next round from the upstream.
func (r *Relay) readRound(up Upstream) (int, error) {
	if r.zeroCopy {
		return r.spliceRound(up)
	}
	return r.copyRound(up)
}
