package relay

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relayChild is one child: its connection, and a goroutine sending its
// jobs in order.
type relayChild struct {
	name   string
	conn   net.Conn
	jobs   chan childJob
	tokens chan struct{} // one per job the child may have queued
	slack  int
	skip   int64 // stream bytes the child already has, still to skip
	pipe   rawPipe
	dead   atomic.Bool
	// detached says the child was cut off on purpose: not a loss to report.
	detached atomic.Bool
	err      error
	// spool, for a paced child, takes its rounds so that it never holds
	// the relay back; nil for the others.
	spool *spool
	// held is how long, in all, the relay waited for this child to take
	// a round (nanoseconds): a child that holds the others back; waiting,
	// when it waits now, since when (Unix nanoseconds).
	held, waiting atomic.Int64
	done          chan struct{}
	once          sync.Once
	r             *Relay
}

// childJob is what a child is sent next: n bytes from its pipe (splice),
// data (copy), or a catch-up from the history.
type childJob struct {
	n       int
	skip    int // of those first bytes, how many to discard
	data    []byte
	extra   []byte // after a short tee, the rest from user space
	catchUp bool
	from    int64
	to      int64
	release func()
}

// defaultDeliveryStall bounds the wait for a child that stopped reading
// just before the end: a disk pausing for a few seconds is normal.
const defaultDeliveryStall = 30 * time.Second

// childSlack is how many rounds a child may fall behind before the relay
// waits for it, so children sharing a link do not stall each other.
const childSlack = 3

func (r *Relay) newChild(name string, c net.Conn, paced bool) (*relayChild, error) {
	ch := &relayChild{name: name, conn: c, jobs: make(chan childJob, childSlack+1), tokens: make(chan struct{}, childSlack), slack: childSlack, done: make(chan struct{}), r: r}
	if paced {
		s, err := newSpool(r.spoolDir, r.spoolLimit, c)
		if err != nil {
			return nil, err
		}
		ch.spool = s
	}
	if r.zeroCopy {
		p, err := r.sp.childPipe()
		if err != nil {
			if ch.spool != nil {
				c.Close()
				ch.spool.release()
			}
			return nil, err
		}
		ch.pipe = p
	}
	for range ch.slack {
		ch.tokens <- struct{}{}
	}
	r.mu.Lock()
	r.named[name] = ch
	r.mu.Unlock()
	go ch.run()
	return ch, nil
}

// send queues a job that takes no token (a catch-up).
func (ch *relayChild) send(j childJob) { ch.jobs <- j }

func (ch *relayChild) run() {
	defer close(ch.done)
	for j := range ch.jobs {
		if !ch.dead.Load() {
			if err := ch.r.sendJob(ch, j); err != nil {
				ch.err = fmt.Errorf("sending to %s: %w", ch.name, err)
				ch.dead.Store(true)
				ch.conn.Close()
			}
		}
		if ch.dead.Load() && ch.r.zeroCopy {
			drain(ch.pipe.r)
		}
		if j.release != nil {
			j.release()
		}
		if !j.catchUp {
			ch.tokens <- struct{}{}
		}
	}
}

// takeToken takes a token for the next round, waiting if the child has
// not sent the rounds it holds; the wait counts in held.
func (ch *relayChild) takeToken() {
	select {
	case <-ch.tokens:
	default:
		t := time.Now()
		ch.waiting.Store(t.UnixNano())
		<-ch.tokens
		ch.held.Add(int64(time.Since(t)))
		ch.waiting.Store(0)
	}
}

// heldNow is how long the relay has waited for the child in all, the
// wait going on included.
func (ch *relayChild) heldNow(now time.Time) time.Duration {
	// Read waiting first: a wait that ends in between is then counted in
	// held, not twice.
	w := ch.waiting.Load()
	d := ch.held.Load()
	if w != 0 {
		if w2 := ch.waiting.Load(); w2 == w {
			d += now.UnixNano() - w
		}
	}
	return time.Duration(d)
}

// cut stops sending to the child at once, from any goroutine: its
// connection is closed, so a send blocked on it returns.
func (ch *relayChild) cut() {
	ch.detached.Store(true)
	ch.dead.Store(true)
	ch.conn.Close()
}

// wait waits until the child has been sent every job queued.
func (ch *relayChild) wait(ctx context.Context) error {
	for range ch.slack {
		select {
		case <-ch.tokens:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for range ch.slack {
		ch.tokens <- struct{}{}
	}
	return nil
}

// finish stops the child: a clean half-close after everything was sent,
// or closing its connection.
func (ch *relayChild) finish(clean bool) {
	ch.once.Do(func() {
		if !clean {
			ch.conn.Close() // unblocks a send in progress
		}
		close(ch.jobs)
		<-ch.done
		if s := ch.spool; s != nil {
			// A paced child is finished once its spool has gone out,
			// however long that takes; cutting the child (Detach, the
			// relay's end) closes its connection and ends the wait.
			s.close()
			if err := s.wait(); err != nil && clean && !ch.dead.Load() {
				ch.err = fmt.Errorf("sending to %s: %w", ch.name, err)
				ch.dead.Store(true)
			}
		}
		if clean && !ch.dead.Load() {
			// A half-close says "end of stream" (the child sends nothing
			// that could be left unread and turn the close into a
			// reset). The kernel would deliver what it still queues
			// after the close too, but only while this host is up, and
			// a netbooted node powers off next: wait until the child's
			// kernel has acknowledged it all. A child that never does is
			// the server's to notice (it falls silent, or stops short);
			// Detach cuts the wait.
			if cw, ok := ch.conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			awaitDelivered(ch.conn, ch.r.deliveryStall)
		}
		// Named until here, so that Detach can cut the wait above.
		ch.r.mu.Lock()
		if ch.r.named[ch.name] == ch {
			delete(ch.r.named, ch.name)
		}
		ch.r.mu.Unlock()
		ch.conn.Close()
		if ch.spool != nil {
			ch.spool.release()
		}
		if ch.r.zeroCopy {
			ch.pipe.close()
		}
	})
}

// distributeCopy is the portable path: every child gets the round's bytes.
func (r *Relay) distributeCopy(n int) error {
	data := r.copyBuf[:n]
	r.copyBuf = nil
	for _, ch := range r.children {
		ch.takeToken()
		j := childJob{data: data}
		if ch.skip > 0 {
			k := min(ch.skip, int64(n))
			ch.skip -= k
			j.data = data[k:]
		}
		ch.jobs <- j
	}
	if err := r.hist.write(data); err != nil {
		return fmt.Errorf("relay: local copy: %w", err)
	}
	return nil
}

func (r *Relay) copyRound(up Upstream) (int, error) {
	if r.copyBuf == nil {
		r.copyBuf = make([]byte, roundSize) // children keep the previous one
	}
	n, err := up.Read(r.copyBuf)
	if err == nil && n == 0 {
		err = io.ErrNoProgress
	}
	return n, err
}

// sendJob sends one job to a child.
func (r *Relay) sendJob(ch *relayChild, j childJob) error {
	var w io.Writer = ch.conn
	if ch.spool != nil {
		if err := ch.spool.failed(); err != nil {
			return err
		}
		w = ch.spool
	}
	switch {
	case j.catchUp:
		return r.hist.writeRange(w, j.from, j.to)
	case j.data != nil:
		_, err := w.Write(j.data)
		return err
	default:
		return r.sendSplice(ch, j)
	}
}
