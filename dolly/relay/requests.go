package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// The relay's loop owns its children and its upstream; other goroutines
// change them by handing it requests, waking it if it waits on a silent
// upstream.

type requestKind int

const (
	reqUpstream requestKind = iota
	reqAttach
	reqDetach
	reqNames
)

type relayRequest struct {
	kind  requestKind
	up    Upstream
	conn  net.Conn
	name  string
	from  int64
	paced bool
	reply chan relayReply
}

type relayReply struct {
	pos   int64
	names []string
	err   error
}

// request hands a request to the loop, waking it if it waits on upstream.
func (r *Relay) request(ctx context.Context, q relayRequest) (relayReply, error) {
	q.reply = make(chan relayReply, 1)
	// A loop that waits on its upstream takes requests only once woken;
	// waking one that is busy costs it a spare turn, nothing more.
	r.pending.Add(1)
	r.wake()
	giveUp := func() {
		r.pending.Add(-1)
		select {
		case r.given <- struct{}{}:
		default:
		}
	}
	select {
	case r.reqs <- q:
	case <-ctx.Done():
		giveUp()
		return relayReply{}, ctx.Err()
	case <-r.stopped:
		giveUp()
		return relayReply{}, errRelayStopped
	}
	select {
	case rep := <-q.reply:
		return rep, rep.err
	case <-ctx.Done():
		return relayReply{}, ctx.Err()
	}
}

// wake interrupts a read from the upstream so the loop takes requests.
func (r *Relay) wake() {
	r.mu.Lock()
	up := r.up
	r.mu.Unlock()
	if up != nil {
		up.SetReadDeadline(time.Unix(1, 0))
	}
}

var errRelayStopped = errors.New("relay stopped")

// SetUpstream makes c the relay's upstream from now on, dropping the old
// one. It returns the position the new upstream must send from.
func (r *Relay) SetUpstream(ctx context.Context, c Upstream) (int64, error) {
	rep, err := r.request(ctx, relayRequest{kind: reqUpstream, up: c})
	return rep.pos, err
}

// Attach adds a child that has the stream up to from. The bytes it lacks
// come from the history; an error means the history no longer holds them.
func (r *Relay) Attach(ctx context.Context, name string, c net.Conn, from int64) error {
	_, err := r.request(ctx, relayRequest{kind: reqAttach, name: name, conn: c, from: from})
	return err
}

// AttachPaced adds a child, as Attach does, that is served at its own
// pace: what it has not taken yet waits in a spool file (Config.SpoolDir),
// so it never holds back the relay and the other children.
func (r *Relay) AttachPaced(ctx context.Context, name string, c net.Conn, from int64) error {
	_, err := r.request(ctx, relayRequest{kind: reqAttach, name: name, conn: c, from: from, paced: true})
	return err
}

// Held reports, for each child, how long the relay has waited in all for
// it to take the stream: a child that holds the relay back (a slow link or
// disk) gathers it, one that keeps up does not.
func (r *Relay) Held() map[string]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := make(map[string]time.Duration, len(r.named))
	for name, ch := range r.named {
		out[name] = ch.heldNow(now)
	}
	return out
}

// MostHeld names the child the relay waited for longest between two
// readings of Held, if for at least least; "" if none was.
func MostHeld(before, after map[string]time.Duration, least time.Duration) string {
	most, name := least, ""
	for child, d := range after {
		if d-before[child] >= most && d-before[child] > 0 {
			most, name = d-before[child], child
		}
	}
	return name
}

// ChildNames lists the children.
func (r *Relay) ChildNames(ctx context.Context) []string {
	rep, _ := r.request(ctx, relayRequest{kind: reqNames})
	return rep.names
}

// Detach drops a child and closes its connection.
func (r *Relay) Detach(ctx context.Context, name string) error {
	// The loop may be waiting for this very child to take its bytes: cut
	// it off first, so the loop goes on and takes the request.
	r.mu.Lock()
	ch := r.named[name]
	r.mu.Unlock()
	if ch != nil {
		ch.cut()
	}
	_, err := r.request(ctx, relayRequest{kind: reqDetach, name: name})
	return err
}

// takeRequests handles the requests waiting, without blocking.
func (r *Relay) takeRequests(ctx context.Context) {
	for {
		select {
		case q := <-r.reqs:
			r.handle(ctx, q)
		default:
			return
		}
	}
}

// awaitPending takes the requests on their way, so that one whose wake-up
// came before it could be sent does not wait for the upstream's next bytes.
func (r *Relay) awaitPending(ctx context.Context) error {
	for r.pending.Load() > 0 {
		select {
		case q := <-r.reqs:
			r.handle(ctx, q)
		case <-r.given:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *Relay) handle(ctx context.Context, q relayRequest) {
	r.pending.Add(-1)
	var rep relayReply
	switch q.kind {
	case reqUpstream:
		r.mu.Lock()
		old := r.up
		r.up = q.up
		r.mu.Unlock()
		if old != nil {
			old.Close()
		}
		q.up.SetReadDeadline(time.Time{})
		rep.pos = r.pos.Load()
	case reqAttach:
		rep.err = r.attach(ctx, q.name, q.conn, q.from, q.paced)
		if rep.err != nil {
			q.conn.Close()
		}
	case reqNames:
		for _, ch := range r.children {
			rep.names = append(rep.names, ch.name)
		}
	case reqDetach:
		for i, ch := range r.children {
			if ch.name == q.name {
				ch.finish(false)
				r.children = append(r.children[:i], r.children[i+1:]...)
				break
			}
		}
	}
	q.reply <- rep
}

// attach adds a child from stream offset from: what it lacks up to here
// comes from the history, what it has beyond here is skipped.
func (r *Relay) attach(ctx context.Context, name string, c net.Conn, from int64, paced bool) error {
	if r.zeroCopy {
		if _, ok := c.(syscall.Conn); !ok {
			return fmt.Errorf("relay: child %s is not a socket", name)
		}
	}
	pos := r.pos.Load()
	ch, err := r.newChild(name, c, paced)
	if err != nil {
		return err
	}
	if from < pos {
		// Everything received has gone into the history; wait until it
		// is there before serving from it.
		if err := r.hist.waitEnd(pos); err != nil {
			ch.finish(false)
			return err
		}
		release, ok := r.hist.hold(from)
		if !ok {
			ch.finish(false)
			start, end := r.hist.bounds()
			return fmt.Errorf("relay: child %s needs the stream from byte %d; this node holds [%d, %d)", name, from, start, end)
		}
		ch.send(childJob{catchUp: true, from: from, to: pos, release: release})
	} else {
		ch.skip = from - pos
	}
	if r.ended {
		// Nothing more will come: the child gets the end of its stream
		// once its catch-up is sent (finish waits for queued jobs).
		r.finishLate(ctx, ch)
		return nil
	}
	r.children = append(r.children, ch)
	return nil
}
