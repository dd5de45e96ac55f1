package dolly

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"dolly/imaging"
)

// NodeConfig configures a node.
type NodeConfig struct {
	Server     string // dolly-server's control address, host:port
	Target     string // where to write; overrides the server's -target
	Name       string // how the server shows this node; default: the hostname
	DataListen string // where upstream connects; default ":0" (any port)
	// JoinTimeout bounds the wait for the server to answer; 0 waits forever,
	// as a netbooted node must when it boots before the server starts.
	JoinTimeout time.Duration
	// ConnectTimeout bounds setting up the data path once assigned.
	ConnectTimeout time.Duration
	// ProgressEvery is how often the node reports progress.
	ProgressEvery time.Duration
	// NoSplice forwards with user-space copies even where splice works, to
	// compare the two or to work around a kernel that misbehaves.
	NoSplice bool
	// NoProbe skips measuring the machine when joining.
	NoProbe bool
	Logger  *slog.Logger
}

func (c *NodeConfig) defaults() {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.DataListen == "" {
		c.DataListen = ":0"
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 2 * time.Minute
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// NodeResult is what a node did.
type NodeResult struct {
	Target  string
	Written int64
	Digest  imaging.Digest
	Elapsed time.Duration
}

// node is one run of the node agent.
type node struct {
	cfg  NodeConfig
	log  *slog.Logger
	ln   net.Listener
	ctl  *Conn
	msgs chan Message // control messages after the handshake
	rerr chan error   // why the control connection ended
}

// RunNode joins the cast at cfg.Server, writes the image to the target,
// forwards it to the node's children and returns once the server has
// confirmed the target verified. Any other outcome is an error.
func RunNode(ctx context.Context, cfg NodeConfig) (NodeResult, error) {
	cfg.defaults()
	n := &node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name)}
	ln, err := net.Listen("tcp", cfg.DataListen)
	if err != nil {
		return NodeResult{}, fmt.Errorf("data listener on %s: %w", cfg.DataListen, err)
	}
	n.ln = ln
	defer ln.Close()
	ctl, err := n.dialServer(ctx)
	if err != nil {
		return NodeResult{}, err
	}
	n.ctl = ctl
	defer ctl.Close()
	stop := context.AfterFunc(ctx, func() { ctl.Close(); ln.Close() })
	defer stop()
	res, err := n.run(ctx)
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return res, err
}

// dialServer connects to the server, retrying with backoff.
func (n *node) dialServer(ctx context.Context) (*Conn, error) {
	if n.cfg.JoinTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.JoinTimeout)
		defer cancel()
	}
	backoff := 100 * time.Millisecond
	var d net.Dialer
	for attempt := 0; ; attempt++ {
		c, err := d.DialContext(ctx, "tcp", n.cfg.Server)
		if err == nil {
			return NewConn(c), nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("cannot reach dolly-server at %s: %w", n.cfg.Server, err)
		}
		if attempt == 0 || attempt%10 == 0 {
			n.log.Info("waiting for dolly-server", "server", n.cfg.Server, "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot reach dolly-server at %s: %w", n.cfg.Server, err)
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (n *node) run(ctx context.Context) (NodeResult, error) {
	_, port, _ := net.SplitHostPort(n.ln.Addr().String())
	dataHost, _, _ := net.SplitHostPort(n.cfg.DataListen)
	if ip := net.ParseIP(dataHost); ip != nil && ip.IsUnspecified() {
		dataHost = ""
	}
	hello := Hello{Version: Version, Name: n.cfg.Name, MACs: MACs(), DataAddr: net.JoinHostPort(dataHost, port), Target: n.cfg.Target}
	if err := n.ctl.Send(Message{Type: MsgHello, Hello: &hello}); err != nil {
		return NodeResult{}, err
	}
	m, err := n.ctl.Recv(0)
	if err != nil {
		return NodeResult{}, fmt.Errorf("joining: %w", err)
	}
	switch m.Type {
	case MsgReject:
		return NodeResult{}, fmt.Errorf("server refused this node: %s", m.Reason)
	case MsgAbort:
		return NodeResult{}, fmt.Errorf("server aborted the cast: %s", m.Reason)
	case MsgWelcome:
	default:
		return NodeResult{}, fmt.Errorf("joining: unexpected %s message", m.Type)
	}
	w := m.Welcome
	target := n.cfg.Target
	if target == "" {
		target = w.Target
	}
	if target == "" {
		return NodeResult{}, n.fail("no target: give the node -target PATH, or the server -target")
	}
	info, err := imaging.CheckTarget(target, w.ImageSize)
	if err != nil {
		return NodeResult{}, n.fail(err.Error())
	}
	n.log.Info("joined", "image", w.Image, "size", w.ImageSize, "target", target)
	ready := Ready{Target: target, TargetSize: info.Size, Block: info.Block}
	if !n.cfg.NoProbe {
		localIP := n.ctl.LocalAddr().(*net.TCPAddr).IP
		p := RunProbe(ctx, ProbeConfig{Name: n.cfg.Name, Target: target, LocalIP: localIP})
		for _, note := range p.Notes {
			n.log.Info("probe", "note", note)
		}
		ready.Probe = &p.Probe
	}
	if err := n.ctl.Send(Message{Type: MsgReady, Ready: &ready}); err != nil {
		return NodeResult{}, err
	}

	n.msgs, n.rerr = make(chan Message, 16), make(chan error, 1)
	go n.readControl()
	m, err = n.next(ctx)
	if err != nil {
		return NodeResult{}, err
	}
	if m.Type != MsgAssign {
		return NodeResult{}, fmt.Errorf("waiting for the cast: unexpected %s message", m.Type)
	}
	return n.cast(ctx, w, target, m.Assign)
}

// fail tells the server why this node cannot go on and returns that as an error.
func (n *node) fail(reason string) error {
	n.ctl.Send(Message{Type: MsgFail, Reason: reason})
	return errors.New(reason)
}

func (n *node) readControl() {
	for {
		m, err := n.ctl.Recv(0)
		if err != nil {
			n.rerr <- err
			return
		}
		n.msgs <- m
	}
}

// next returns the next control message; an abort or a lost server is an
// error. Messages that arrived before the connection ended come first.
func (n *node) next(ctx context.Context) (Message, error) {
	var m Message
	select {
	case m = <-n.msgs:
	case err := <-n.rerr:
		select {
		case m = <-n.msgs:
			n.rerr <- err // for the next call
		default:
			n.rerr <- err
			return Message{}, fmt.Errorf("lost the server: %w", err)
		}
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
	if m.Type == MsgAbort {
		return m, fmt.Errorf("server aborted the cast: %s", m.Reason)
	}
	return m, nil
}

// cast sets up the data path, receives, writes and forwards the image.
func (n *node) cast(ctx context.Context, w *Welcome, target string, a *Assign) (NodeResult, error) {
	res := NodeResult{Target: target}
	deadline := time.Now().Add(n.cfg.ConnectTimeout)
	upc := make(chan acceptResult, 1)
	go func() { upc <- n.acceptUpstream(w.Cast, deadline) }()
	children, err := dialChildren(ctx, a.Children, deadline)
	if err != nil {
		return res, n.fail(err.Error())
	}
	var up acceptResult
	select {
	case up = <-upc:
	case m := <-n.msgs:
		closeAll(children)
		return res, fmt.Errorf("waiting for upstream %s: server sent %s: %s", a.Upstream, m.Type, m.Reason)
	}
	if up.err != nil {
		closeAll(children)
		return res, n.fail(fmt.Sprintf("no stream from upstream %s: %v", a.Upstream, up.err))
	}
	defer up.conn.Close()
	// Interrupting the node stops the stream too, not only the control link.
	stopUp := context.AfterFunc(ctx, func() { up.conn.Close() })
	defer stopUp()
	h := up.header
	if h.ImageSize != w.ImageSize || h.Encoding.String() != a.Encoding {
		closeAll(children)
		return res, n.fail(fmt.Sprintf("stream from %s does not match the cast (%s %d bytes, want %s %d)", a.Upstream, h.Encoding, h.ImageSize, a.Encoding, w.ImageSize))
	}
	tg, err := imaging.OpenTarget(target, h.ImageSize)
	if err != nil {
		closeAll(children)
		return res, n.fail(err.Error())
	}
	defer tg.Close()

	// Children get the header as it came, then the relay takes over.
	hb := h.MarshalBinary()
	for i, c := range children {
		if _, err := c.Write(hb); err != nil {
			closeAll(children)
			return res, n.fail(fmt.Sprintf("sending to child %s: %v", a.Children[i].Name, err))
		}
	}
	relay, err := NewRelay(up.conn, children)
	if err != nil {
		closeAll(children)
		return res, n.fail(err.Error())
	}
	defer relay.Local.Close()
	if n.cfg.NoSplice {
		relay.zeroCopy = false
	}
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run() }()
	n.log.Info("casting", "upstream", a.Upstream, "children", len(children), "zero_copy", relay.ZeroCopy())

	start := time.Now()
	var counters Counters
	stopProgress := n.reportProgress(&counters, relay)
	digest, _, rerr := Receive(relay.Local, h, tg, &counters)
	if rerr != nil {
		// Keep the stream flowing for the children while this node gives up.
		io.Copy(io.Discard, relay.Local)
	}
	if rerr == nil {
		rerr = tg.Sync()
	}
	relayErr := <-relayDone
	stopProgress()
	res.Written, res.Digest, res.Elapsed = counters.Written.Load(), digest, time.Since(start)
	if rerr != nil {
		return res, n.fail(rerr.Error())
	}
	if relayErr != nil {
		return res, n.fail(relayErr.Error())
	}
	var lost []string
	for i := range children {
		if err := relay.ChildErr(i); err != nil {
			lost = append(lost, a.Children[i].Name)
			n.log.Warn("lost child", "child", a.Children[i].Name, "err", err)
		}
	}
	done := Done{Digest: digest.String(), Written: res.Written, Seconds: res.Elapsed.Seconds(), Lost: lost}
	if err := n.ctl.Send(Message{Type: MsgDone, Done: &done}); err != nil {
		return res, err
	}
	m, err := n.next(ctx)
	if err != nil {
		return res, err
	}
	if m.Type != MsgResult {
		return res, fmt.Errorf("waiting for the verdict: unexpected %s message", m.Type)
	}
	if !m.Result.OK {
		return res, fmt.Errorf("server did not verify this node: %s", m.Result.Message)
	}
	return res, nil
}

// reportProgress sends progress until the returned stop is called.
func (n *node) reportProgress(c *Counters, r *Relay) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(n.cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			p := Progress{Stream: c.Stream.Load(), Written: c.Written.Load(), Forwarded: r.Forwarded()}
			if n.ctl.Send(Message{Type: MsgProgress, Progress: &p}) != nil {
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}

type acceptResult struct {
	conn   net.Conn
	header StreamHeader
	err    error
}

// acceptUpstream waits for the connection that carries this cast's stream.
// Connections that do not open with this cast's header are dropped.
func (n *node) acceptUpstream(cast CastID, deadline time.Time) acceptResult {
	if tl, ok := n.ln.(*net.TCPListener); ok {
		tl.SetDeadline(deadline)
	}
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return acceptResult{err: err}
		}
		c.SetReadDeadline(deadline)
		hb := make([]byte, StreamHeaderLen)
		_, err = io.ReadFull(c, hb)
		var h StreamHeader
		if err == nil {
			h, err = ParseStreamHeader(hb)
		}
		if err == nil && h.Cast != cast {
			err = fmt.Errorf("stream of another cast (%s)", h.Cast)
		}
		if err != nil {
			n.log.Warn("dropped data connection", "from", c.RemoteAddr(), "err", err)
			c.Close()
			continue
		}
		c.SetReadDeadline(time.Time{})
		return acceptResult{conn: c, header: h}
	}
}

// dialChildren connects to every child, retrying until deadline: a child
// may still be setting up its listener.
func dialChildren(ctx context.Context, peers []Peer, deadline time.Time) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, len(peers))
	for _, p := range peers {
		c, err := dialRetry(ctx, p.Addr, deadline)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("cannot connect to child %s at %s: %w", p.Name, p.Addr, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// DialRetry dials addr until it answers or deadline passes.
func dialRetry(ctx context.Context, addr string, deadline time.Time) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	backoff := 50 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// DialData connects to a node's data listener, retrying until deadline.
func DialData(ctx context.Context, addr string, deadline time.Time) (net.Conn, error) {
	return dialRetry(ctx, addr, deadline)
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// MACs lists the hardware addresses of the machine's interfaces.
func MACs() []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && len(i.HardwareAddr) > 0 {
			out = append(out, i.HardwareAddr.String())
		}
	}
	return out
}
