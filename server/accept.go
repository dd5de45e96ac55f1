package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"sync"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/listen"
	"dolly/imaging"
)

// acceptLoop takes nodes' control connections until the listener closes.
// A connection whose peer has not yet said hello and proved the key is a
// stranger's: each address may hold at most maxStrangers of them, and each
// has helloTimeout to say hello in at most preAuthLimit bytes.
func (s *Server) acceptLoop(ctx context.Context, wg *sync.WaitGroup) {
	listen.Serve(ctx, s.ln, s.log, func(c net.Conn) {
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		if !s.strangers.enter(host) {
			s.log.Warn("too many connections not yet admitted; closing one", "from", c.RemoteAddr())
			c.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handleNode(ctx, control.NewConn(c), host)
		}()
	})
}

const (
	maxStrangers = 64              // connections per address before admission
	helloTimeout = 5 * time.Second // for a peer to say hello
	preAuthLimit = 16 << 10        // bytes of a message before admission
)

// strangers counts the connections of each address not yet admitted.
type strangers struct {
	mu sync.Mutex
	n  map[string]int
}

func (g *strangers) enter(host string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == nil {
		g.n = map[string]int{}
	}
	if g.n[host] >= maxStrangers {
		return false
	}
	g.n[host]++
	return true
}

func (g *strangers) leave(host string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n[host]--; g.n[host] <= 0 {
		delete(g.n, host)
	}
}

// handleNode serves one node's control connection for its whole life: the
// hello, the key handshake and the welcome here, then its messages
// (serveNode).
func (s *Server) handleNode(ctx context.Context, c *control.Conn, host string) {
	defer c.Close()
	admitted := false
	defer func() {
		if !admitted {
			s.strangers.leave(host)
		}
	}()
	c.SetLimit(preAuthLimit)
	m, err := c.Recv(helloTimeout)
	if err != nil {
		s.log.Warn("no hello", "from", c.RemoteAddr(), "err", err)
		return
	}
	if m.Type != control.MsgHello {
		s.log.Warn("expected hello", "from", c.RemoteAddr(), "got", m.Type)
		return
	}
	// What a stranger's hello may carry is bounded before any of it is
	// shown: a refusal names the node.
	if m.Hello.Capture != nil {
		c.Send(control.Message{Type: control.MsgReject, Reason: "this server casts an image: to capture one, run dolly-server -capture -o FILE"})
		return
	}
	if err := checkHello(m.Hello); err != nil {
		s.log.Warn("refused node", "from", c.RemoteAddr(), "reason", err)
		c.Send(control.Message{Type: control.MsgReject, Reason: err.Error()})
		return
	}
	var secret []byte // an enrolled node's, to seal the cast key under
	if m.Hello.Enroll != nil {
		if secret = s.enrollNode(c, m.Hello); secret == nil {
			return
		}
	} else if !s.authenticate(c, m.Hello) {
		return
	}
	// A node that proved the key, or any node of a cast without one, is
	// no stranger any more.
	admitted = true
	s.strangers.leave(host)
	c.SetLimit(control.MaxMessage)
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
	// Nor before the source has measured itself (see Server.Run).
	select {
	case <-s.probed:
	case <-ctx.Done():
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
	s.mu.Lock()
	cast := s.cast // a node taking a cast up may set it
	s.mu.Unlock()
	w := control.Welcome{Cast: cast, Image: s.cfg.Image, ImageSize: s.img.Size, Target: s.cfg.Target,
		Fingerprint: s.fingerprint, Resumed: n.resumed, Encrypted: s.cfg.Key != nil && s.cfg.Encrypt,
		MeasureTarget: s.confirmed(), Probe: n.probes, SkipDecoders: s.unusedDecoders(), UsedMap: s.usedMap, Disk: s.disk}
	if s.signer != nil {
		w.SignKey = s.signer.Public().(ed25519.PublicKey)
		w.SignKeySig = control.SignSignKey(s.identity, cast, w.SignKey)
	}
	if secret != nil {
		w.SealedKey = control.SealCastKey(secret, s.cfg.Key)
	}
	if !s.img.Encoding.Compressed() {
		w.Encoder = imaging.EncoderID(imaging.Zstd)
	}
	if s.cfg.Key == nil {
		s.mu.Lock()
		w.DataToken, w.ProbeToken = n.token, n.probeToken
		s.mu.Unlock()
	}
	if err := c.Send(control.Message{Type: control.MsgWelcome, Welcome: &w}); err != nil {
		s.lostNode(n, c, err)
		return
	}
	s.mu.Lock()
	if n.conn == c {
		// Nothing else may reach the node before its welcome: no ping,
		// and no assignment (the roll call waits for this).
		n.welcomed = true
	}
	s.mu.Unlock()
	s.signal()
	if returned {
		s.post(castEvent{kind: evReturned, node: n})
	}
	s.serveNode(n, c)
}

// enrollNode runs the enrollment of a node that holds no cast key (a
// netbooted one) and admits it if the allow-list names it. It returns the
// secret the node's welcome seals the cast key under; nil if the node is
// refused, and the refusal is shown.
func (s *Server) enrollNode(c *control.Conn, h *control.Hello) []byte {
	secret, err := control.ServerEnroll(c, s.identity, h, peerTimeout)
	if err == nil && !s.allowed(h) {
		err = fmt.Errorf("not admitted: neither its name nor its MACs (%s) match -allow %s", strings.Join(h.MACs, ", "), strings.Join(s.cfg.Allow, ","))
		if len(s.cfg.Allow) == 0 {
			err = errors.New("not admitted: a node without the cast key joins only with -allow naming it (its name or its MAC)")
		}
	}
	if err == nil {
		s.log.Info("enrolled node", "node", h.Name, "from", c.RemoteAddr())
		return secret
	}
	s.log.Warn("refused node", "node", h.Name, "from", c.RemoteAddr(), "reason", err)
	fmt.Fprintf(s.cfg.Out, "  refused %s from %s: %v\n", h.Name, c.RemoteAddr(), err)
	c.Send(control.Message{Type: control.MsgReject, Reason: err.Error()})
	return nil
}

// allowed reports whether the allow-list admits a node by its name or one
// of its MACs (patterns as path.Match takes them, MACs in lower case).
func (s *Server) allowed(h *control.Hello) bool {
	for _, pat := range s.cfg.Allow {
		if ok, _ := path.Match(pat, h.Name); ok {
			return true
		}
		for _, mac := range h.MACs {
			if ok, _ := path.Match(strings.ToLower(pat), strings.ToLower(mac)); ok {
				return true
			}
		}
	}
	return false
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

// unusedDecoders are the codecs no plan of this cast decodes at a node: a
// compressed image is sent as stored or decoded at the source, and a raw
// one is compressed with zstd, if at all; -compress no decodes nothing.
func (s *Server) unusedDecoders() []string {
	var unused []string
	for _, enc := range []imaging.Encoding{imaging.Zstd, imaging.Gzip} {
		sent := enc == s.img.Encoding || (!s.img.Encoding.Compressed() && enc == imaging.Zstd)
		if !sent || s.cfg.Compress == CompressNo {
			unused = append(unused, enc.String())
		}
	}
	return unused
}
