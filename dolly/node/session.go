package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/stream"
)

// session is the node's side of the control connection for its whole run.
// One goroutine (run) reads the connection and hands each message to the
// node in the order it came, so a verdict sent just before the server went
// away is never lost behind the loss. Once the cast is under way
// (resumable), a lost server is found again: the session reconnects,
// resumes the cast with it and tells the node it is back. Before the cast,
// and after the verdict, a lost server ends the session.
type session struct {
	n         *node
	events    chan sessionEvent
	resumable atomic.Bool

	mu     sync.Mutex
	conn   *control.Conn // nil while reconnecting
	closed bool
}

// sessionEvent is a message from the server, the server being back after
// it was lost, or the end of the session.
type sessionEvent struct {
	msg  control.Message
	back bool  // reconnected: the node says again what the server may have missed
	err  error // the session ended
}

func newSession(n *node, c *control.Conn) *session {
	return &session{n: n, conn: c, events: make(chan sessionEvent, 16)}
}

// send sends on the current connection, if there is one.
func (s *session) send(m control.Message) error {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return errors.New("no connection to the server")
	}
	return c.Send(m)
}

// close ends the session: its connection is closed and it does not
// reconnect.
func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
	}
}

// replace makes c (nil: none) the connection, closing the old one. It
// reports false, closing c, once the session is closed.
func (s *session) replace(c *control.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn = c
	if s.closed && c != nil {
		c.Close()
		s.conn = nil
	}
	return !s.closed
}

// run reads the server's messages until the session ends.
func (s *session) run(ctx context.Context) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	verdict := false
	for {
		m, err := c.Recv(s.n.cfg.ServerTimeout)
		if err == nil {
			verdict = verdict || m.Type == control.MsgResult
			if !s.deliver(ctx, sessionEvent{msg: m}) {
				return
			}
			continue
		}
		if verdict || !s.replace(nil) {
			return // the server has said all it had to say, or the node is leaving
		}
		if !s.resumable.Load() {
			s.deliver(ctx, sessionEvent{err: fmt.Errorf("lost the server: %w", err)})
			return
		}
		s.n.log.Warn("lost the server; keeping what this node has and reconnecting", "err", err)
		if c = s.reconnect(ctx); c == nil {
			s.deliver(ctx, sessionEvent{err: fmt.Errorf("lost the server and could not get back to it within %v", s.n.cfg.ReconnectTimeout)})
			return
		}
		if !s.replace(c) || !s.deliver(ctx, sessionEvent{back: true}) {
			return
		}
	}
}

func (s *session) deliver(ctx context.Context, ev sessionEvent) bool {
	select {
	case s.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// next returns the next message before the cast; an abort or a lost
// server is an error.
func (s *session) next(ctx context.Context) (control.Message, error) {
	select {
	case ev := <-s.events:
		if ev.err != nil {
			return control.Message{}, ev.err
		}
		if ev.msg.Type == control.MsgAbort {
			return ev.msg, fmt.Errorf("server aborted the cast: %s", ev.msg.Reason)
		}
		return ev.msg, nil
	case <-ctx.Done():
		return control.Message{}, ctx.Err()
	}
}

// reconnect finds the server again and resumes the cast with it; nil if
// it cannot within the reconnect timeout.
func (s *session) reconnect(ctx context.Context) *control.Conn {
	n := s.n
	deadline := time.Now().Add(n.cfg.ReconnectTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := n.dialServer(ctx, time.Until(deadline))
		if err != nil {
			return nil
		}
		resume := n.resume()
		m, err := n.hello(c, &resume, n.cfg.ServerTimeout)
		switch {
		case err != nil:
			n.log.Warn("rejoining the server failed", "err", err)
		case m.Type == control.MsgWelcome && m.Welcome.Resumed && m.Welcome.Encrypted == n.welcome.Encrypted:
			if err := n.takeBack(m.Welcome); err != nil {
				n.log.Warn("server does not take this node back as it should", "err", err)
				break
			}
			// A restarted server hands this node's new tokens (and its
			// signing key) to peers only after this: a peer must not
			// reach the node before the node knows them.
			ready := n.ready
			if err := c.Send(control.Message{Type: control.MsgReady, Ready: &ready}); err != nil {
				n.log.Warn("rejoining the server failed", "err", err)
				break
			}
			n.log.Info("back with the server", "pos", resume.Pos)
			return c
		default:
			n.log.Warn("server does not take this node back", "reply", m.Type, "reason", m.Reason)
		}
		c.Close()
		t := time.NewTimer(time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return nil
}

// takeBack takes what the welcome of a server this node comes back to
// hands out: a restarted server has tokens and a frame-signing key of its
// own, the latter signed by the server key.
func (n *node) takeBack(w *control.Welcome) error {
	if n.frameKey == nil {
		if len(w.DataToken) != stream.TokenLen || len(w.ProbeToken) != stream.TokenLen {
			return errors.New("no data tokens: anyone could feed this node")
		}
		n.setTokens(w)
		return nil
	}
	signKey, err := control.CheckSignKey(n.cfg.ServerKey, n.welcome.Cast, w)
	if err != nil {
		return err
	}
	n.frameKey.Trust(signKey)
	return nil
}

// resume is where this node's cast stands, for a server it comes back to.
func (n *node) resume() control.Resume {
	done, digest := n.out.get()
	r := control.Resume{Cast: n.welcome.Cast, Fingerprint: n.welcome.Fingerprint, Encoding: n.encoding,
		Pos: n.relay.Pos(), Target: n.target, Done: done, Encoder: n.welcome.Encoder}
	if done {
		r.Digest = digest.String()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.header != nil {
		r.FrameSize = int(n.header.FrameSize)
	}
	return r
}
