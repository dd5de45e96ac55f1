package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"
	"unicode"

	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/units"
)

// register adds a node, or takes back one that had lost the server, or
// says why it cannot join. returned is set for a node of the running cast
// that came back after it was given up.
func (s *Server) register(c *control.Conn, h *control.Hello) (n *nodeState, returned bool, reason string) {
	if h.Version != stream.Version {
		return nil, false, fmt.Sprintf("protocol version %d, server speaks %d: run the same dolly version on server and nodes", h.Version, stream.Version)
	}
	if h.Name == "" {
		return nil, false, "node has no name: give it -name"
	}
	if err := checkHello(h); err != nil {
		return nil, false, err.Error()
	}
	if s.cfg.Admit != nil {
		if why := s.cfg.Admit(h.Name, h.MACs); why != "" {
			return nil, false, why
		}
	}
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	dhost, dport, err := net.SplitHostPort(h.DataAddr)
	if err != nil || dport == "" {
		return nil, false, fmt.Sprintf("bad data address %q", h.DataAddr)
	}
	if dhost == "" {
		dhost = host
	}
	dataAddr := net.JoinHostPort(dhost, dport)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted != "" {
		return nil, false, "the cast was aborted: " + s.aborted
	}
	defer func() {
		if n != nil && s.cfg.Key == nil {
			// Fresh tokens with every welcome, made before the cast loop
			// can send the node's peers anything.
			n.token, n.probeToken = stream.NewToken(), stream.NewToken()
		}
	}()
	if r := h.Resume; r != nil {
		return s.registerResumed(c, h, r, dataAddr, host)
	}
	if s.over {
		return nil, false, "the cast is over: wait for the next cast"
	}
	if s.started {
		// A PC that booted late: it gets the image in this cast, served
		// apart so that it holds no one back (see joinLate).
		n, reason = s.enroll(c, h, dataAddr, host, "joined late")
		if n != nil {
			n.late, n.probes = true, false
		}
		return n, false, reason
	}
	n, reason = s.enroll(c, h, dataAddr, host, "joined")
	return n, false, reason
}

// enroll adds a node that said hello h on c to the roll, unless a node of
// its name has joined, and shows it there as what. The node is new to
// this server: it has joined, its target not yet checked. Called with s.mu.
func (s *Server) enroll(c *control.Conn, h *control.Hello, dataAddr, host, what string) (*nodeState, string) {
	if old, dup := s.byName[h.Name]; dup {
		return nil, fmt.Sprintf("a node named %q has already joined from %s: give each node a unique -name", h.Name, old.from)
	}
	n := &nodeState{name: h.Name, from: c.RemoteAddr().String(), dataAddr: dataAddr, target: h.Target, conn: c, status: stJoined,
		machine: machineKey(h.Machine, h.MACs, host), macs: h.MACs}
	// One node measures each machine, alone: nodes that share a machine
	// and measured it at once would each see a fraction of it.
	n.probes = !slices.ContainsFunc(s.nodes, func(m *nodeState) bool { return m.machine == n.machine && m.probes })
	s.nodes = append(s.nodes, n)
	s.byName[n.name] = n
	s.lastJoined = time.Now()
	s.joinedCPU = probe.ReadCPUTimes()
	s.printRoll(what, n)
	return n, ""
}

// registerResumed takes a node that is part of a cast already: one of this
// server's, coming back, or one a previous server (killed, restarted) ran,
// which this server takes up if its image is the same. Called with s.mu.
func (s *Server) registerResumed(c *control.Conn, h *control.Hello, r *control.Resume, dataAddr, host string) (*nodeState, bool, string) {
	if r.Fingerprint != s.fingerprint {
		return nil, false, "this node is part of a cast of another image: restart it to join this one"
	}
	if enc, err := imaging.ParseEncoding(r.Encoding); err == nil && enc.Compressed() && !s.img.Encoding.Compressed() &&
		r.Encoder != imaging.EncoderID(enc) {
		return nil, false, fmt.Sprintf("this node's cast was compressed on the fly by another encoder (%s; here %s): restart it to cast anew", r.Encoder, imaging.EncoderID(enc))
	}
	if s.started {
		if r.Cast != s.cast {
			return nil, false, "this node is part of another cast: wait for the next cast"
		}
		n := s.byName[h.Name]
		if n == nil {
			return nil, false, "this node is not part of this cast"
		}
		n.conn, n.from, n.dataAddr, n.welcomed = c, c.RemoteAddr().String(), dataAddr, false
		n.lastHeard = time.Now()
		// It may have lost the old connection before its verdict came.
		n.left, n.told = false, false
		if r.Pos > n.pos {
			n.pos = r.Pos
		}
		n.resumed = true
		// Given up meanwhile: it goes back in at the end of the line.
		return n, s.tree.placeOf(n) == takenOut && !r.Done, ""
	}
	if s.resume == nil {
		s.resume = r
		s.cast = r.Cast
		if r.FrameSize > 0 {
			s.cfg.FrameSize = r.FrameSize
		}
		fmt.Fprintf(s.cfg.Out, "  taking up cast %s where it was (%s stream, %s frames)\n", r.Cast, r.Encoding, units.FormatBytes(int64(r.FrameSize)))
	} else if r.Cast != s.resume.Cast || r.Encoding != s.resume.Encoding || r.FrameSize != s.resume.FrameSize {
		return nil, false, "this node is part of another cast than the other nodes: restart it to join this one"
	}
	n, reason := s.enroll(c, h, dataAddr, host, "back")
	if n == nil {
		return nil, false, reason
	}
	// It checked its target when it joined the cast it comes from, and
	// says ready again once it has taken this server's welcome: its new
	// tokens and signing key, which no peer may use before it knows them.
	n.target, n.pos, n.resumed = r.Target, r.Pos, true
	if r.Done {
		n.status, n.digest = stDone, r.Digest
	}
	return n, false, ""
}

// checkHello bounds what a hello may carry: names and paths end up in the
// admin's view and the report.
func checkHello(h *control.Hello) error {
	if len(h.Name) > 64 || strings.IndexFunc(h.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':')
	}) >= 0 {
		return fmt.Errorf("node name %.64q: use at most 64 letters, digits, '-', '_', '.' or ':'", h.Name)
	}
	switch {
	case len(h.MACs) > 64:
		return fmt.Errorf("hello lists %d MAC addresses (at most 64)", len(h.MACs))
	case len(h.Target) > 4096 || strings.ContainsAny(h.Target, "\x00\n"):
		return errors.New("target path too long or not printable")
	case len(h.DataAddr) > 256:
		return errors.New("data address too long")
	case h.Nonce != nil && len(h.Nonce) != 16:
		return fmt.Errorf("nonce of %d bytes, want 16", len(h.Nonce))
	}
	for _, m := range h.MACs {
		if len(m) > 32 {
			return errors.New("MAC address too long")
		}
	}
	if c := h.Capture; c != nil && (c.Size <= 0 || len(c.Source) > 1024 || strings.IndexFunc(c.Source, unicode.IsControl) >= 0) {
		return errors.New("capture: source name too long or not printable, or no size")
	}
	return nil
}

// printRoll reports a node joining or leaving before the cast. The caller
// holds s.mu.
func (s *Server) printRoll(what string, n *nodeState) {
	count := fmt.Sprint(len(s.nodes))
	if s.cfg.Nodes > 0 {
		count += fmt.Sprintf("/%d", s.cfg.Nodes)
	}
	fmt.Fprintf(s.cfg.Out, "  %-6s %-16s from %s (%s)\n", what, n.name, n.from, count)
	t := EvJoined
	if what == "left" {
		t = EvLeft
	}
	s.emit(Event{Type: t, Node: n.name, Text: fmt.Sprintf("%s %s from %s (%s)", what, n.name, n.from, count)})
}

// lostNode records a control connection c of n that ended. A node that
// leaves before the plan is fixed is forgotten, so it can come back (a
// machine rebooting while the lab joins); one in the cast is taken out,
// its children rewired.
func (s *Server) lostNode(n *nodeState, c *control.Conn, err error) {
	s.mu.Lock()
	if n.conn != c {
		s.mu.Unlock()
		return // it came back on another connection
	}
	if !s.started && (n.status == stJoined || n.status == stReady) {
		delete(s.byName, n.name)
		s.nodes = slices.DeleteFunc(s.nodes, func(m *nodeState) bool { return m == n })
		s.printRoll("left", n)
		s.mu.Unlock()
		s.signal()
		return
	}
	placed := s.tree.placeOf(n) == inTree
	inCast := placed && !(n.status == stDone && n.verdict == verified)
	if placed && n.verdict == verified {
		// Its work is done, but a child may still lack the tail of the
		// stream: checkNodes rewires it if it stops short.
		n.left = true
	}
	done := n.finished()
	s.mu.Unlock()
	reason := "lost contact"
	if !errors.Is(err, io.EOF) {
		reason = fmt.Sprintf("lost contact: %v", err)
	}
	switch {
	case inCast:
		s.log.Warn("node lost", "node", n.name, "err", err)
		s.post(castEvent{kind: evDown, node: n, reason: reason})
	case !done:
		s.mu.Lock()
		n.status, n.end, n.reason = stFailed, time.Now(), reason
		s.mu.Unlock()
		s.signal()
	}
}

// waitForNodes waits until the expected nodes have joined and answered,
// and returns the ready ones in plan order.
func (s *Server) waitForNodes(ctx context.Context) ([]*nodeState, error) {
	want := s.cfg.Nodes
	var enter chan struct{}
	if want == 0 {
		enter = make(chan struct{})
		go func() {
			bufio.NewReader(s.cfg.In).ReadString('\n')
			close(enter)
		}()
	}
	var timeout <-chan time.Time
	if s.cfg.JoinTimeout > 0 {
		t := time.NewTimer(s.cfg.JoinTimeout)
		defer t.Stop()
		timeout = t.C
	}
	pressed := false
	for {
		s.mu.Lock()
		joined := len(s.nodes)
		answered := 0
		for _, n := range s.nodes {
			// A node that came back (a restarted server's) counts once
			// it has its welcome and has said ready again: the cast's
			// first words to it, and its peers' connections, must not
			// overtake that.
			if n.status != stJoined && n.welcomed {
				answered++
			}
		}
		enough := (want > 0 && joined >= want) || (want == 0 && pressed && joined > 0)
		if enough && answered == joined {
			s.started = true
			var ready []*nodeState
			for _, n := range s.nodes {
				switch n.status {
				case stReady:
					ready = append(ready, n)
				case stRefused:
					fmt.Fprintf(s.cfg.Out, "  refused %s: %s\n", n.name, n.reason)
				}
			}
			s.mu.Unlock()
			if len(ready) == 0 && !s.anyDone() {
				return nil, errors.New("no node is ready to receive the image")
			}
			sortNodes(ready)
			return ready, nil
		}
		s.mu.Unlock()
		select {
		case <-s.changed:
		case <-enter:
			pressed, enter = true, nil
			if joined == 0 {
				fmt.Fprintln(s.cfg.Out, "no node has joined yet; waiting for the first")
			}
		case <-timeout:
			return nil, fmt.Errorf("timed out waiting for nodes: %d of %d joined", joined, want)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// anyDone reports whether a node came back with the whole image already.
func (s *Server) anyDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.status == stDone {
			return true
		}
	}
	return false
}
