package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"dolly/dolly/control"
)

// acceptLoop takes nodes' control connections until the listener closes.
func (s *Server) acceptLoop(ctx context.Context, wg *sync.WaitGroup) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("accept", "err", err)
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handleNode(ctx, control.NewConn(c))
		}()
	}
}

// handleNode serves one node's control connection for its whole life: the
// hello, the key handshake and the welcome here, then its messages
// (serveNode).
func (s *Server) handleNode(ctx context.Context, c *control.Conn) {
	defer c.Close()
	m, err := c.Recv(peerTimeout)
	if err != nil {
		s.log.Warn("no hello", "from", c.RemoteAddr(), "err", err)
		return
	}
	if m.Type != control.MsgHello {
		s.log.Warn("expected hello", "from", c.RemoteAddr(), "got", m.Type)
		return
	}
	if !s.authenticate(c, m.Hello) {
		return
	}
	// Whether a node may join, and how, depends on the image.
	select {
	case <-s.scanned:
	case <-ctx.Done():
		return
	}
	if s.scanErr != nil {
		c.Send(control.Message{Type: control.MsgAbort, Reason: "the cast was aborted: " + s.scanErr.Error()})
		return
	}
	n, returned, reason := s.register(c, m.Hello)
	if n == nil {
		s.log.Warn("refused node", "from", c.RemoteAddr(), "reason", reason)
		c.Send(control.Message{Type: control.MsgReject, Reason: reason})
		return
	}
	s.log.Info("node joined", "node", n.name, "from", n.from, "resumed", n.resumed)
	s.signal()
	defer s.signal()
	w := control.Welcome{Cast: s.cast, Image: s.cfg.Image, ImageSize: s.img.Size, Target: s.cfg.Target,
		Fingerprint: s.fingerprint, Resumed: n.resumed, Encrypted: s.cfg.Key != nil && s.cfg.Encrypt,
		MeasureTarget: s.confirmed(), Probe: n.probes}
	if err := c.Send(control.Message{Type: control.MsgWelcome, Welcome: &w}); err != nil {
		s.lostNode(n, c, err)
		return
	}
	if returned {
		s.post(castEvent{kind: evReturned, node: n})
	}
	s.serveNode(n, c)
}

// authenticate runs the key handshake of a keyed cast with a node that
// said hello: the server proves it knows the key, then the node must. A
// node that cannot is refused, and the refusal is shown.
func (s *Server) authenticate(c *control.Conn, h *control.Hello) bool {
	err := control.ServerHandshake(c, s.cfg.Key, h, peerTimeout)
	if err == nil {
		return true
	}
	s.log.Warn("refused node", "node", h.Name, "from", c.RemoteAddr(), "reason", err)
	fmt.Fprintf(s.cfg.Out, "  refused %s from %s: %v\n", h.Name, c.RemoteAddr(), err)
	c.Send(control.Message{Type: control.MsgReject, Reason: err.Error()})
	return false
}
