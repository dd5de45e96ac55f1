package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/dial"
	"dolly/dolly/listen"
	"dolly/dolly/relay"
	"dolly/dolly/stream"
)

// upstreamOrder lets a data connection become the upstream only if none
// accepted after it already has.
type upstreamOrder struct {
	mu  sync.Mutex
	seq uint64 // accept number of the current upstream's connection
}

// take runs set, which makes connection seq the upstream, unless a later
// connection is the upstream already; it reports whether it ran.
func (o *upstreamOrder) take(seq uint64, set func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq < o.seq {
		return false
	}
	o.seq = seq
	set()
	return true
}

// attach connects to a child and adds it to the relay from where it is.
func (n *node) attach(ctx context.Context, p control.Peer) {
	err := n.attachChild(ctx, p)
	if err != nil {
		n.log.Warn("cannot serve child", "child", p.Name, "err", err)
		n.ctl.send(control.Message{Type: control.MsgAttachFailed, Peer: &p, Reason: err.Error()})
	}
}

func (n *node) attachChild(ctx context.Context, p control.Peer) error {
	h, err := n.streamHeader(ctx)
	if err != nil {
		return err
	}
	c, err := dial.Data(ctx, p.Addr, time.Now().Add(n.cfg.ConnectTimeout))
	if err != nil {
		return fmt.Errorf("cannot connect to child %s at %s: %w", p.Name, p.Addr, err)
	}
	pos, err := stream.OpenStream(c, h, n.frameKey, p.Token)
	if err != nil {
		c.Close()
		return fmt.Errorf("child %s: %w", p.Name, err)
	}
	if p.Paced {
		return n.relay.AttachPaced(ctx, p.Name, c, pos)
	}
	return n.relay.Attach(ctx, p.Name, c, pos)
}

// streamHeader waits for the stream's header, known once the first
// upstream has connected.
func (n *node) streamHeader(ctx context.Context) (stream.StreamHeader, error) {
	select {
	case <-n.headerSet:
	case <-ctx.Done():
		return stream.StreamHeader{}, ctx.Err()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return *n.header, nil
}

// acceptData takes every data connection from the moment the node has
// joined: bandwidth probes before the plan, upstreams once the cast is on.
func (n *node) acceptData(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { n.ln.Close() })
	defer stop()
	var seq uint64
	listen.Serve(ctx, n.ln, n.log, func(c net.Conn) {
		seq++
		go n.takeData(ctx, c, seq)
	})
}

// takeData runs the handshake of c, the seq-th data connection accepted,
// and hands it on: a probe is counted, an upstream waits for the cast.
func (n *node) takeData(ctx context.Context, c net.Conn, seq uint64) {
	// A node that is going away must not leave its upstream waiting for
	// the handshake's timeout.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	in, err := stream.AcceptStream(c)
	if err == nil {
		err = in.Verify(n.frameKey, n.token(in.Probe != 0))
	}
	if err != nil {
		n.log.Warn("dropped data connection", "from", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	if in.Probe != 0 {
		n.receiveProbe(c, in.Probe)
		return
	}
	select {
	case <-n.casting:
	case <-ctx.Done():
		c.Close()
		return
	}
	n.takeUpstream(ctx, c, in, seq)
}

// takeUpstream makes c, the seq-th data connection accepted, the relay's
// upstream. Handshakes run side by side and end in any order: an upstream
// that was taken out of the cast (its connection accepted, its handshake
// slow) must not displace the one the server gave next, so a connection
// never replaces one accepted after it.
func (n *node) takeUpstream(ctx context.Context, c net.Conn, in *stream.Incoming, seq uint64) {
	isFirst, err := n.checkHeader(in.Header)
	if err != nil {
		n.log.Warn("dropped data connection", "from", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	if isFirst {
		// The children connect before the stream flows, so none of it
		// has to be caught up. A child that is slow to answer (or dead)
		// must not keep the upstream waiting for this node's answer:
		// after a while the stream flows, and the child catches up from
		// the history once it connects.
		var wg sync.WaitGroup
		for _, p := range n.initial {
			wg.Add(1)
			go func() { defer wg.Done(); n.attach(ctx, p) }()
		}
		attached := make(chan struct{})
		go func() { wg.Wait(); close(attached) }()
		select {
		case <-attached:
		case <-time.After(initialAttachWait):
			n.log.Warn("children slow to connect; the stream flows and they catch up", "wait", initialAttachWait)
		case <-ctx.Done():
		}
	}
	up, ok := c.(relay.Upstream)
	if !ok {
		c.Close()
		return
	}
	var pos int64
	if !n.upstreams.take(seq, func() { pos, err = n.relay.SetUpstream(ctx, up) }) {
		n.log.Warn("dropped a stale data connection: a newer upstream is in place", "from", c.RemoteAddr())
		c.Close()
		return
	}
	if err == nil {
		err = in.Answer(n.frameKey, n.token(false), pos)
	}
	if err != nil {
		n.log.Warn("upstream connection failed", "from", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	n.log.Info("upstream connected", "from", c.RemoteAddr(), "pos", pos)
}

// initialAttachWait bounds how long a node's first upstream waits while
// the node connects to its own children: well within the upstream's
// handshake timeout.
const initialAttachWait = 3 * time.Second

// checkHeader accepts a header of this cast and this stream; the first one
// defines the stream.
func (n *node) checkHeader(h stream.StreamHeader) (isFirst bool, err error) {
	if h.Cast != n.welcome.Cast {
		return false, fmt.Errorf("stream of another cast (%s)", h.Cast)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.header == nil {
		if h.ImageSize != n.welcome.ImageSize || h.Encoding.String() != n.encoding {
			return false, fmt.Errorf("stream does not match the cast (%s %d bytes, want %s %d)", h.Encoding, h.ImageSize, n.encoding, n.welcome.ImageSize)
		}
		n.header = &h
		// Before the relay has its first upstream: no byte has come yet.
		n.sums.Start(h, n.frameKey)
		close(n.headerSet)
		n.firstHeader <- h
		return true, nil
	}
	if h != *n.header {
		return false, errors.New("stream differs from the one this node has")
	}
	return false, nil
}
