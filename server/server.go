// Package server is dolly-server's coordinator: it registers nodes, checks
// their targets, plans the cast, streams the image as the source, shows
// progress and verifies every node's digest against the source's.
package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"dolly/capacity"
	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/units"
)

// Config configures one cast.
type Config struct {
	Image string // image file or block device
	// Shape is the operator's topology; empty lets the capacity model pick.
	Shape    capacity.Kind
	Fanout   int      // for trees
	Compress Compress // whether the stream may be compressed (default auto)
	// Topology describes the network for the capacity model; nil assumes
	// every host on one switch at its probed link speed.
	Topology *capacity.Topology
	// NoProbe skips measuring this machine (the model then lacks the
	// source's figures).
	NoProbe bool
	Nodes   int    // start once this many nodes have joined (0: ask on a terminal)
	Target  string // default target for nodes that name none
	Listen  string // control address, host:port

	MaxRate   float64 // source sending rate limit in bytes/s (0: none)
	FrameSize int
	Yes       bool // do not ask for confirmation
	// Key is the cast key: only nodes that prove they know it join, and
	// every frame carries a tag under it. Encrypt also encrypts the
	// frames (a keyed cast only).
	Key     castkey.Key
	Encrypt bool
	// After is what netbooted nodes do once verified: "reboot",
	// "poweroff", "shell" or "" (the node program just exits).
	After string

	// JoinTimeout bounds the wait for nodes (0: wait forever).
	JoinTimeout time.Duration
	// NodeTimeout is how long a node may be silent during the cast before
	// it is taken out and its children get the stream from its upstream.
	NodeTimeout time.Duration
	// StallTimeout is how long a node may make no progress while its
	// upstream is ahead before it is taken out as stalled.
	StallTimeout time.Duration
	// ProgressEvery is the interval of plain progress lines.
	ProgressEvery time.Duration

	Out         io.Writer // the admin's view: plan, progress, summary
	In          io.Reader // answers to prompts
	Interactive bool      // Out and In are a terminal
	Logger      *slog.Logger

	// Ready, if set, receives the control address once the server listens.
	Ready func(addr net.Addr)
}

// DefaultListen is the control port nodes connect to.
const DefaultListen = ":9700"

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.FrameSize == 0 {
		c.FrameSize = stream.DefaultFrameSize
	}
	if c.Compress == "" {
		c.Compress = CompressAuto
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = 5 * time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 5 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	// The roll call, the progress view and rewiring notes come from
	// different goroutines; each write stays whole.
	c.Out = &lockedWriter{w: c.Out}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Summary is the outcome of a cast.
type Summary struct {
	Image    string
	Size     int64
	Digest   imaging.Digest
	Plan     Choice // what ran and what the model predicted of it
	Nodes    []NodeSummary
	Elapsed  time.Duration
	Verified int
	// StreamBytes is the length of the stream the source encoded;
	// ResumedBytes how much of it every node had already when a restarted
	// server took the cast up, and was not sent again.
	StreamBytes  int64
	ResumedBytes int64
}

// NodeSummary is one node's outcome.
type NodeSummary struct {
	Name     string
	Target   string
	Status   string
	Reason   string
	Elapsed  time.Duration
	Verified bool
}

// ErrNotAllVerified means the cast ended with at least one node not verified.
var ErrNotAllVerified = errors.New("not every node was verified")

// Server runs one cast.
type Server struct {
	cfg  Config
	log  *slog.Logger
	img  *imaging.Image
	ln   net.Listener
	cast stream.CastID

	mu      sync.Mutex
	nodes   []*nodeState // in join order
	byName  map[string]*nodeState
	started bool   // the plan is fixed; later joins are turned away
	aborted string // why the cast was called off, for nodes that come later
	changed chan struct{}

	scanned chan struct{} // closed once the image's size and digest are known
	scanErr error
	profile probe.Profile // what the model needs of the image, once scanned

	probed chan struct{} // closed once the source's own probe is done
	probe  probe.Report

	fingerprint string // of the image, for nodes that come back
	// resume is set when the nodes bring a cast under way: a restarted
	// server takes it up where it was.
	resume *control.Resume

	// The cast as it runs.
	events     chan castEvent
	src        *source
	sourceKids []*nodeState // the source's children
	castNodes  []*nodeState // every node of the cast
}

// Run casts cfg.Image to the nodes that join and returns the summary. The
// error is nil only if every node verified its target.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg.defaults()
	s := &Server{cfg: cfg, log: cfg.Logger, byName: map[string]*nodeState{}, changed: make(chan struct{}, 1),
		scanned: make(chan struct{}), probed: make(chan struct{}), events: make(chan castEvent, 1024)}
	if _, err := rand.Read(s.cast[:]); err != nil {
		return Summary{}, err
	}
	if err := stream.CheckFrameSize(cfg.FrameSize); err != nil {
		return Summary{}, err
	}
	img, err := imaging.OpenImage(cfg.Image)
	if err != nil {
		return Summary{}, err
	}
	defer img.Close()
	s.img = img
	if s.fingerprint, err = img.Fingerprint(); err != nil {
		return Summary{}, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return Summary{}, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	s.ln = ln
	defer ln.Close()
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer func() {
		// Stop taking nodes and hang up on the ones we have, then wait for
		// their goroutines, so Run leaves nothing behind.
		cancel()
		ln.Close()
		s.closeAll()
		wg.Wait()
	}()
	wg.Add(1)
	go func() { defer wg.Done(); s.acceptLoop(ctx, &wg) }()
	go func() {
		s.scan(ctx)
		// After the scan, so the probe times codecs on the image itself
		// and does not compete with the scan for the CPU.
		s.probeSelf(ctx)
	}()
	return s.run(ctx)
}

func (s *Server) run(ctx context.Context) (Summary, error) {
	sum := Summary{Image: s.cfg.Image}
	fmt.Fprintf(s.cfg.Out, "dolly-server: image %s (%s, %s stored), listening on %s\n",
		s.cfg.Image, s.img.Encoding, units.FormatBytes(s.img.StreamSize), s.ln.Addr())
	if s.cfg.Nodes > 0 {
		fmt.Fprintf(s.cfg.Out, "waiting for %d nodes to join\n", s.cfg.Nodes)
	} else {
		fmt.Fprintln(s.cfg.Out, "waiting for nodes; press Enter to start with the nodes that have joined")
	}
	select {
	case <-s.scanned:
	case <-ctx.Done():
		return sum, ctx.Err()
	}
	if s.scanErr != nil {
		s.abortAll(s.scanErr.Error())
		return sum, s.scanErr
	}
	sum.Size = s.img.Size

	ready, err := s.waitForNodes(ctx)
	if err != nil {
		s.abortAll(err.Error())
		return s.summary(sum), err
	}
	var choice Choice
	if s.resume != nil {
		choice, err = s.resumePlan(ready)
		if err != nil {
			s.abortAll(err.Error())
			return s.summary(sum), err
		}
	} else {
		choice = s.choose(ctx, ready)
	}
	sum.Plan = choice
	plan := s.bind(choice, ready)
	printPreview(s.cfg.Out, choice)
	s.printPlan(plan, choice)
	if !s.cfg.Yes && s.cfg.Interactive {
		ok, err := s.confirm(ready)
		if err != nil || !ok {
			s.abortAll("cancelled by the operator")
			return s.summary(sum), errors.New("cast cancelled")
		}
	}
	start := time.Now()
	digest, err := s.runCast(ctx, plan)
	sum.Digest = digest
	sum.Elapsed = time.Since(start)
	if s.src != nil {
		sum.StreamBytes, sum.ResumedBytes = s.src.sent.Load(), s.src.skip
	}
	sum = s.summary(sum)
	s.printSummary(sum)
	if err != nil {
		return sum, err
	}
	if sum.Verified != len(sum.Nodes) {
		return sum, fmt.Errorf("%w: %d of %d verified", ErrNotAllVerified, sum.Verified, len(sum.Nodes))
	}
	return sum, nil
}

// scan learns a compressed image's raw size and digest before any node is
// welcomed, so a truncated image is caught before a byte is written.
func (s *Server) scan(ctx context.Context) {
	defer close(s.scanned)
	s.profile, s.scanErr = s.scanImage(ctx)
}

// scanImage profiles the image for the model; a compressed one is decoded
// whole on the way (probe.Image), which can take a while: say so.
func (s *Server) scanImage(ctx context.Context) (probe.Profile, error) {
	if !s.img.Encoding.Compressed() {
		return probe.Image(ctx, s.img, nil)
	}
	fmt.Fprintf(s.cfg.Out, "scanning %s (%s): checking it decodes whole and learning its size…\n", s.cfg.Image, s.img.Encoding)
	start := time.Now()
	last := start
	p, err := probe.Image(ctx, s.img, func(raw int64) {
		if now := time.Now(); now.Sub(last) >= s.cfg.ProgressEvery {
			last = now
			fmt.Fprintf(s.cfg.Out, "  scanned %s so far\n", units.FormatBytes(raw))
		}
	})
	if err != nil {
		return p, err
	}
	fmt.Fprintf(s.cfg.Out, "  %s decodes to %s (compression factor %.2f) in %s\n", s.cfg.Image,
		units.FormatBytes(s.img.Size), float64(s.img.Size)/float64(s.img.StreamSize), formatDuration(time.Since(start)))
	return p, nil
}

// probeSelf measures the source for the capacity model while nodes join.
func (s *Server) probeSelf(ctx context.Context) {
	defer close(s.probed)
	if s.cfg.NoProbe {
		return
	}
	s.probe = probe.Run(ctx, probe.Config{Name: SourceName, Image: s.cfg.Image, Compress: true})
}

func (s *Server) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

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

// peerTimeout bounds each wait for a peer's answer outside the cast: a
// hello, a proof, a node's data listener.
const peerTimeout = 30 * time.Second

// handleNode serves one node's control connection for its whole life.
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
		Fingerprint: s.fingerprint, Resumed: n.resumed, Encrypted: s.cfg.Key != nil && s.cfg.Encrypt}
	if err := c.Send(control.Message{Type: control.MsgWelcome, Welcome: &w}); err != nil {
		s.lostNode(n, c, err)
		return
	}
	if returned {
		s.post(castEvent{kind: evReturned, node: n})
	}
	for {
		m, err := c.Recv(0)
		if err != nil {
			s.lostNode(n, c, err)
			return
		}
		s.handleMessage(n, c, m)
	}
}

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
	if r := h.Resume; r != nil {
		return s.registerResumed(c, h, r, dataAddr, host)
	}
	if s.started {
		return nil, false, "the cast has already started: wait for the next cast"
	}
	if old, dup := s.byName[h.Name]; dup {
		return nil, false, fmt.Sprintf("a node named %q has already joined from %s: give each node a unique -name", h.Name, old.from)
	}
	n = &nodeState{name: h.Name, from: c.RemoteAddr().String(), dataAddr: dataAddr, target: h.Target, conn: c, status: stJoined,
		machine: machineKey(h.MACs, host)}
	s.nodes = append(s.nodes, n)
	s.byName[n.name] = n
	s.printRoll("joined", n)
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
	return nil
}

// registerResumed takes a node that is part of a cast already: one of this
// server's, coming back, or one a previous server (killed, restarted) ran,
// which this server takes up if its image is the same. Called with s.mu.
func (s *Server) registerResumed(c *control.Conn, h *control.Hello, r *control.Resume, dataAddr, host string) (*nodeState, bool, string) {
	if r.Fingerprint != s.fingerprint {
		return nil, false, "this node is part of a cast of another image: restart it to join this one"
	}
	if s.started {
		if r.Cast != s.cast {
			return nil, false, "this node is part of another cast: wait for the next cast"
		}
		n := s.byName[h.Name]
		if n == nil {
			return nil, false, "this node is not part of this cast"
		}
		n.conn, n.from, n.dataAddr = c, c.RemoteAddr().String(), dataAddr
		n.lastHeard = time.Now()
		// It may have lost the old connection before its verdict came.
		n.left, n.told = false, false
		if r.Pos > n.pos {
			n.pos = r.Pos
		}
		n.resumed = true
		// Given up meanwhile: it goes back in at the end of the line.
		return n, n.removed && !r.Done, ""
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
	if old, dup := s.byName[h.Name]; dup {
		return nil, false, fmt.Sprintf("a node named %q has already joined from %s: give each node a unique -name", h.Name, old.from)
	}
	n := &nodeState{name: h.Name, from: c.RemoteAddr().String(), dataAddr: dataAddr, target: r.Target, conn: c,
		status: stReady, machine: machineKey(h.MACs, host), pos: r.Pos, resumed: true}
	if r.Done {
		n.status, n.digest = stDone, r.Digest
	}
	s.nodes = append(s.nodes, n)
	s.byName[n.name] = n
	s.printRoll("back", n)
	return n, false, ""
}

func (s *Server) handleMessage(n *nodeState, c *control.Conn, m control.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.conn != c {
		return // an old connection of a node that came back
	}
	now := time.Now()
	n.lastHeard = now
	switch m.Type {
	case control.MsgReady:
		if n.status != stJoined {
			return
		}
		n.status, n.target, n.targetSize, n.block = stReady, m.Ready.Target, m.Ready.TargetSize, m.Ready.Block
		n.probe = nil
		if len(m.Ready.Probe) > 0 {
			var p capacity.Probe
			if err := json.Unmarshal(m.Ready.Probe, &p); err != nil {
				s.log.Warn("node's probe is unreadable; planning without it", "node", n.name, "err", err)
			} else {
				n.probe = &p
			}
		}
		s.log.Info("node ready", "node", n.name, "target", n.target)
	case control.MsgProgress:
		n.observe(*m.Progress, now)
	case control.MsgDone:
		if n.status != stCasting {
			return
		}
		n.status, n.end, n.digest = stDone, now, m.Done.Digest
		n.progress.Written = m.Done.Written
		n.pos = max(n.pos, m.Done.Pos) // its last progress may be older than the end
	case control.MsgFail:
		switch n.status {
		case stJoined, stReady:
			n.status = stRefused
		case stCasting, stDone:
			// Its target failed; it stays in the line and relays on, so
			// the nodes below it do not notice.
			n.status, n.end = stFailed, now
		default:
			return
		}
		n.reason = m.Reason
		s.log.Warn("node failed", "node", n.name, "reason", m.Reason)
	case control.MsgAttachFailed:
		s.post(castEvent{kind: evAttachFailed, node: n, child: m.Peer.Name, reason: m.Reason})
	case control.MsgChildLost:
		s.post(castEvent{kind: evChildLost, node: n, child: m.Peer.Name, reason: m.Reason})
	default:
		return
	}
	s.signal()
}

// printRoll reports a node joining or leaving before the cast. The caller
// holds s.mu.
func (s *Server) printRoll(what string, n *nodeState) {
	count := fmt.Sprint(len(s.nodes))
	if s.cfg.Nodes > 0 {
		count += fmt.Sprintf("/%d", s.cfg.Nodes)
	}
	fmt.Fprintf(s.cfg.Out, "  %-6s %-16s from %s (%s)\n", what, n.name, n.from, count)
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
	inCast := n.inTree && !n.removed && !(n.status == stDone && n.verified)
	if n.inTree && !n.removed && n.verified {
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
			if n.status != stJoined {
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

// abortAll tells every node that has not finished that the cast is off.
func (s *Server) abortAll(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	if s.aborted == "" {
		s.aborted = reason
	}
	for _, n := range s.nodes {
		if !n.finished() || n.status == stRefused {
			n.conn.Send(control.Message{Type: control.MsgAbort, Reason: reason})
		}
	}
}

func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		n.conn.Close()
	}
}

func (s *Server) summary(sum Summary) Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum.Nodes = nil
	sum.Verified = 0
	ns := append([]*nodeState(nil), s.nodes...)
	sortNodes(ns)
	for _, n := range ns {
		ns := NodeSummary{Name: n.name, Target: n.target, Status: n.status.String(), Reason: n.reason, Verified: n.verified}
		if !n.start.IsZero() && !n.end.IsZero() {
			ns.Elapsed = n.end.Sub(n.start)
		}
		if n.verified {
			sum.Verified++
		}
		sum.Nodes = append(sum.Nodes, ns)
	}
	return sum
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
