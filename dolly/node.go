package dolly

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
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
	// ReconnectTimeout bounds the wait for a lost server during a cast; the
	// node keeps what it has and goes on when the server is back.
	ReconnectTimeout time.Duration
	// ServerTimeout is how long the node hears nothing from the server
	// before it takes the server for lost.
	ServerTimeout time.Duration
	// ConnectTimeout bounds reaching a child once told to.
	ConnectTimeout time.Duration
	// ProgressEvery is how often the node reports progress.
	ProgressEvery time.Duration
	// NoSplice forwards with user-space copies even where splice works, to
	// compare the two or to work around a kernel that misbehaves.
	NoSplice bool
	// Buffered writes a block device through the page cache instead of
	// with O_DIRECT, for a driver that handles direct writes badly.
	Buffered bool
	// NoProbe skips measuring the machine when joining.
	NoProbe bool
	// Force writes over a target that is mounted or in use.
	Force bool
	// Key is the cast key; with it the node joins only a server that
	// proves it knows the key, and takes only frames tagged under it.
	// Without it the node joins only a server that has none.
	Key    Key
	Logger *slog.Logger
}

func (c *NodeConfig) defaults() {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.DataListen == "" {
		c.DataListen = ":0"
	}
	if c.ReconnectTimeout == 0 {
		c.ReconnectTimeout = 10 * time.Minute
	}
	if c.ServerTimeout == 0 {
		c.ServerTimeout = 15 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 30 * time.Second
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
	// After is the server's after-cast action for netbooted nodes.
	After string
}

// node is one run of the node agent.
type node struct {
	cfg NodeConfig
	log *slog.Logger
	ln  net.Listener

	// The control connection, replaced when the server is lost and found.
	mu  sync.Mutex
	ctl *Conn

	welcome Welcome
	// frameKey checks (and decrypts) the frames of a keyed cast; nil in
	// an unkeyed one.
	frameKey *FrameKey
	target   string
	tg       *imaging.Target
	relay    *Relay
	// header is this cast's stream header, from the first upstream;
	// headerSet is closed once it is known.
	header    *StreamHeader
	headerSet chan struct{}
	encoding  string
	counters  Counters
	start     time.Time
	diskError error

	// receipt is the receiver's outcome once it has the whole stream.
	recvDone chan receipt
	// initial are the children of the first assignment, attached before
	// the stream starts flowing.
	initial []Peer
	// done is set once the node has the image (and reported it).
	done   bool
	digest imaging.Digest

	// upstreams orders upstream changes (see takeUpstream).
	upstreams upstreamOrder
}

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

type receipt struct {
	digest imaging.Digest
	err    error
}

// session is the traffic of one control connection.
type session struct {
	conn *Conn
	msgs chan Message
	err  chan error
}

// RunNode joins the cast at cfg.Server, writes the image to the target,
// forwards it to the node's children and returns once the server has
// confirmed the target verified. Any other outcome is an error. When the
// server is lost during the cast the node keeps its data path and what it
// has, reconnects, and goes on with the server it finds.
func RunNode(ctx context.Context, cfg NodeConfig) (NodeResult, error) {
	cfg.defaults()
	n := &node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name)}
	ln, err := net.Listen("tcp", cfg.DataListen)
	if err != nil {
		return NodeResult{}, fmt.Errorf("data listener on %s: %w", cfg.DataListen, err)
	}
	n.ln = ln
	defer ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := n.run(ctx)
	if n.tg != nil {
		n.tg.Close()
	}
	return res, err
}

func (n *node) current() *Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ctl
}

// send sends on the current control connection, if there is one.
func (n *node) send(m Message) error {
	c := n.current()
	if c == nil {
		return errors.New("no connection to the server")
	}
	return c.Send(m)
}

// dialServer connects to the server, retrying with backoff for up to
// limit (0: forever).
func (n *node) dialServer(ctx context.Context, limit time.Duration) (*Conn, error) {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
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

// join says hello and, in a keyed cast, runs the key handshake: the
// server's proof is checked before anything else happens. It returns the
// server's first message after the handshake.
func (n *node) join(c *Conn, resume *Resume, timeout time.Duration) (Message, error) {
	var nonce []byte
	if n.cfg.Key != nil {
		nonce = newNonce()
	}
	if err := n.hello(c, resume, nonce); err != nil {
		return Message{}, err
	}
	m, err := c.Recv(timeout)
	if err != nil {
		return m, err
	}
	switch {
	case m.Type == MsgChallenge && n.cfg.Key == nil:
		return m, fmt.Errorf("%w: the server requires a cast key: run dolly with -key FILE", ErrAuth)
	case m.Type == MsgChallenge:
		if !hmac.Equal(m.Auth.Proof, ServerProof(n.cfg.Key, nonce, m.Auth.Nonce, n.cfg.Name)) {
			c.Send(Message{Type: MsgFail, Reason: "authentication failed: the server's proof does not match this node's cast key"})
			return m, fmt.Errorf("%w: the server does not know this node's cast key (different -key files?)", ErrAuth)
		}
		proof := NodeProof(n.cfg.Key, nonce, m.Auth.Nonce, n.cfg.Name)
		if err := c.Send(Message{Type: MsgProof, Auth: &Auth{Proof: proof}}); err != nil {
			return m, err
		}
		c.Authenticate(n.cfg.Key, nonce, m.Auth.Nonce, false)
		return c.Recv(timeout)
	case n.cfg.Key != nil && m.Type != MsgReject:
		return m, fmt.Errorf("%w: the server did not prove the cast key (does it run without -key?)", ErrAuth)
	}
	return m, nil
}

func (n *node) hello(c *Conn, resume *Resume, nonce []byte) error {
	_, port, _ := net.SplitHostPort(n.ln.Addr().String())
	dataHost, _, _ := net.SplitHostPort(n.cfg.DataListen)
	if ip := net.ParseIP(dataHost); ip != nil && ip.IsUnspecified() {
		dataHost = ""
	}
	h := Hello{Version: Version, Name: n.cfg.Name, MACs: MACs(), DataAddr: net.JoinHostPort(dataHost, port), Target: n.cfg.Target, Resume: resume, Nonce: nonce}
	return c.Send(Message{Type: MsgHello, Hello: &h})
}

func (n *node) run(ctx context.Context) (NodeResult, error) {
	c, err := n.dialServer(ctx, n.cfg.JoinTimeout)
	if err != nil {
		return NodeResult{}, err
	}
	n.ctl = c
	closeCtl := func() {
		if c := n.current(); c != nil {
			c.Close()
		}
	}
	defer closeCtl()
	stop := context.AfterFunc(ctx, closeCtl)
	defer stop()
	m, err := n.join(c, nil, 0)
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
	n.welcome = *m.Welcome
	if n.cfg.Key != nil {
		n.frameKey = NewFrameKey(n.cfg.Key, n.welcome.Cast, n.welcome.Encrypted)
	}
	n.target = n.cfg.Target
	if n.target == "" {
		n.target = n.welcome.Target
	}
	if n.target == "" {
		return NodeResult{}, n.fail("no target: give the node -target PATH, or the server -target")
	}
	if t, err := ResolveTarget(n.target); err != nil {
		return NodeResult{}, n.fail(err.Error())
	} else {
		n.target = t
	}
	// The disk this machine runs from is never overwritten; one that is
	// mounted or held by someone is, only if the admin insists.
	if err := imaging.CheckTargetUse(n.target); err != nil && !(n.cfg.Force && errors.Is(err, imaging.ErrTargetInUse)) {
		return NodeResult{}, n.fail(err.Error())
	}
	info, err := imaging.CheckTarget(n.target, n.welcome.ImageSize)
	if err != nil {
		return NodeResult{}, n.fail(err.Error())
	}
	n.log.Info("joined", "image", n.welcome.Image, "size", n.welcome.ImageSize, "target", n.target)
	ready := Ready{Target: n.target, TargetSize: info.Size, Block: info.Block}
	if !n.cfg.NoProbe {
		localIP := c.LocalAddr().(*net.TCPAddr).IP
		p := RunProbe(ctx, ProbeConfig{Name: n.cfg.Name, Target: n.target, LocalIP: localIP, Buffered: n.cfg.Buffered})
		for _, note := range p.Notes {
			n.log.Info("probe", "note", note)
		}
		ready.Probe = &p.Probe
	}
	if err := c.Send(Message{Type: MsgReady, Ready: &ready}); err != nil {
		return NodeResult{}, err
	}
	s := n.listen(c)
	m, err = n.next(ctx, s)
	if err != nil {
		return NodeResult{}, err
	}
	if m.Type != MsgAssign {
		return NodeResult{}, fmt.Errorf("waiting for the cast: unexpected %s message", m.Type)
	}
	return n.cast(ctx, s, m.Assign)
}

// fail tells the server why this node cannot go on and returns that as an error.
func (n *node) fail(reason string) error {
	n.send(Message{Type: MsgFail, Reason: reason})
	return errors.New(reason)
}

// listen starts reading a control connection.
func (n *node) listen(c *Conn) *session {
	s := &session{conn: c, msgs: make(chan Message, 16), err: make(chan error, 1)}
	go func() {
		for {
			m, err := c.Recv(n.cfg.ServerTimeout)
			if err != nil {
				s.err <- err
				return
			}
			s.msgs <- m
		}
	}()
	return s
}

// next returns the next control message before the cast; an abort or a
// lost server is an error. Messages that arrived before the connection
// ended come first.
func (n *node) next(ctx context.Context, s *session) (Message, error) {
	var m Message
	select {
	case m = <-s.msgs:
	case err := <-s.err:
		select {
		case m = <-s.msgs:
			s.err <- err // for the next call
		default:
			s.err <- err
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

// cast runs the node's part of the cast: the relay, the receiver writing
// the target, and the control traffic, through lost servers and rewiring,
// until the server's verdict.
func (n *node) cast(ctx context.Context, s *session, a *Assign) (NodeResult, error) {
	n.encoding = a.Encoding
	n.start = time.Now()
	n.headerSet = make(chan struct{})
	relay, err := NewRelay(n.cfg.NoSplice)
	if err != nil {
		return NodeResult{}, n.fail(err.Error())
	}
	// The node serves children that come late (their upstream died) from
	// its history for as long as it is up.
	relay.Linger()
	n.relay = relay
	n.initial = a.Children
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	drained := make(chan struct{})
	go func() {
		if relay.Drained(relayCtx) == nil {
			close(drained)
		}
	}()
	upstreams := make(chan StreamHeader, 1)
	go n.acceptUpstreams(relayCtx, upstreams)
	n.recvDone = make(chan receipt, 1)
	stopProgress := n.reportProgress()
	defer stopProgress()
	n.log.Info("casting", "upstream", a.Upstream, "children", len(a.Children), "zero_copy", relay.ZeroCopy())

	var relayEnded bool
	var verdict *Result
	// The node leaves once its children have everything: with the
	// server's verdict, or after its disk failed.
	reconnected := make(chan *session, 1)
	reconnecting := false
	for {
		if relayEnded && (verdict != nil || n.diskError != nil) {
			if verdict == nil {
				return n.result(), n.diskError
			}
			return n.finish(verdict)
		}
		var msgs <-chan Message
		var lost <-chan error
		if s != nil {
			msgs, lost = s.msgs, s.err
		}
		select {
		case h := <-upstreams:
			// The first upstream's header says what the stream is; start
			// the receiver on it.
			go n.receive(h)
		case m := <-msgs:
			if m.Type == MsgAbort {
				stopRelay()
				return n.result(), fmt.Errorf("server aborted the cast: %s", m.Reason)
			}
			n.handleCastMessage(ctx, relay, m, &verdict)
		case err := <-lost:
			// Messages the server sent before the connection ended (its
			// verdict, say) come first.
			select {
			case m := <-msgs:
				s.err <- err
				if m.Type == MsgAbort {
					stopRelay()
					return n.result(), fmt.Errorf("server aborted the cast: %s", m.Reason)
				}
				n.handleCastMessage(ctx, relay, m, &verdict)
				continue
			default:
			}
			if verdict != nil {
				// The server has said all it had to say; it may well be gone.
				s = nil
				continue
			}
			n.log.Warn("lost the server; keeping what this node has and reconnecting", "err", err)
			n.mu.Lock()
			n.ctl.Close()
			n.ctl = nil
			n.mu.Unlock()
			s = nil
			if !reconnecting {
				reconnecting = true
				go func() { reconnected <- n.reconnect(ctx) }()
			}
		case ns := <-reconnected:
			reconnecting = false
			if ns == nil {
				stopRelay()
				return n.result(), fmt.Errorf("lost the server and could not get back to it within %v", n.cfg.ReconnectTimeout)
			}
			s = ns
			n.mu.Lock()
			n.ctl = ns.conn
			n.mu.Unlock()
			if n.done {
				n.reportDone()
			}
		case ev := <-relay.Events():
			switch ev.Kind {
			case ChildLost:
				n.log.Warn("lost a child", "child", ev.Name, "err", ev.Err)
				n.send(Message{Type: MsgChildLost, Peer: &Peer{Name: ev.Name}, Reason: errText(ev.Err)})
			case UpstreamLost:
				n.log.Warn("lost the upstream; waiting for a new one", "pos", ev.Pos, "err", ev.Err)
			}
		case r := <-n.recvDone:
			n.done = true
			n.digest = r.digest
			if r.err != nil {
				n.diskError = r.err
				n.fail(r.err.Error())
			} else {
				n.reportDone()
			}
		case <-drained:
			relayEnded = true
			drained = nil
		case err := <-relayDone:
			if ctx.Err() == nil {
				return n.result(), n.fail(fmt.Sprintf("relay: %v", err))
			}
		case <-ctx.Done():
			return n.result(), ctx.Err()
		}
	}
}

// handleCastMessage acts on a control message during the cast; an abort is
// the caller's.
func (n *node) handleCastMessage(ctx context.Context, relay *Relay, m Message, verdict **Result) {
	switch m.Type {
	case MsgAttach:
		go n.attach(ctx, *m.Peer)
	case MsgDetach:
		relay.Detach(ctx, m.Peer.Name)
	case MsgAssign:
		// A restarted server places the node anew.
		n.reassign(ctx, m.Assign)
	case MsgResult:
		*verdict = m.Result
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// finish turns the server's verdict into the node's outcome.
func (n *node) finish(v *Result) (NodeResult, error) {
	if n.diskError != nil {
		return n.result(), n.diskError
	}
	res := n.result()
	res.After = v.After
	if !v.OK {
		return res, fmt.Errorf("server did not verify this node: %s", v.Message)
	}
	return res, nil
}

func (n *node) result() NodeResult {
	return NodeResult{Target: n.target, Written: n.counters.Written.Load(), Digest: n.digest, Elapsed: time.Since(n.start)}
}

// receive writes the stream to the target and reports the outcome.
func (n *node) receive(h StreamHeader) {
	tg, err := imaging.OpenTarget(n.target, h.ImageSize, imaging.TargetOptions{Direct: !n.cfg.Buffered})
	if err != nil {
		n.relay.StopReading()
		n.recvDone <- receipt{err: err}
		return
	}
	n.tg = tg
	failed := func(err error) {
		n.log.Error("target failed; relaying on for the nodes downstream", "err", err)
		n.send(Message{Type: MsgFail, Reason: err.Error()})
	}
	d, _, err := receive(n.relay.Reader(), h, n.frameKey, tg, &n.counters, n.relay.EndSeen, failed)
	if err == nil {
		err = tg.Sync()
	}
	n.recvDone <- receipt{digest: d, err: err}
}

func (n *node) reportDone() {
	done := Done{Digest: n.digest.String(), Written: n.counters.Written.Load(), Seconds: time.Since(n.start).Seconds(), Pos: n.relay.Pos()}
	n.send(Message{Type: MsgDone, Done: &done})
}

// assign connects to the children of a (new) assignment.
func (n *node) assign(ctx context.Context, a *Assign) {
	for _, p := range a.Children {
		go n.attach(ctx, p)
	}
}

// reassign replaces the children with those of a restarted server's plan.
func (n *node) reassign(ctx context.Context, a *Assign) {
	for _, name := range n.relay.childNames(ctx) {
		n.relay.Detach(ctx, name)
	}
	n.assign(ctx, a)
}

// attach connects to a child and adds it to the relay from where it is.
func (n *node) attach(ctx context.Context, p Peer) {
	err := n.attachChild(ctx, p)
	if err != nil {
		n.log.Warn("cannot serve child", "child", p.Name, "err", err)
		n.send(Message{Type: MsgAttachFailed, Peer: &p, Reason: err.Error()})
	}
}

func (n *node) attachChild(ctx context.Context, p Peer) error {
	h, err := n.streamHeader(ctx)
	if err != nil {
		return err
	}
	c, err := dialRetry(ctx, p.Addr, time.Now().Add(n.cfg.ConnectTimeout))
	if err != nil {
		return fmt.Errorf("cannot connect to child %s at %s: %w", p.Name, p.Addr, err)
	}
	pos, err := OpenStream(c, h, n.frameKey)
	if err != nil {
		c.Close()
		return fmt.Errorf("child %s: %w", p.Name, err)
	}
	return n.relay.Attach(ctx, p.Name, c, pos)
}

// streamHeader waits for the stream's header, known once the first
// upstream has connected.
func (n *node) streamHeader(ctx context.Context) (StreamHeader, error) {
	select {
	case <-n.headerSet:
	case <-ctx.Done():
		return StreamHeader{}, ctx.Err()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return *n.header, nil
}

// acceptUpstreams takes every data connection that opens with this cast's
// stream header, makes it the relay's upstream and answers the position to
// go on from. The first one's header is handed to the caller.
func (n *node) acceptUpstreams(ctx context.Context, first chan<- StreamHeader) {
	stop := context.AfterFunc(ctx, func() { n.ln.Close() })
	defer stop()
	for seq := uint64(1); ; seq++ {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		go n.takeUpstream(ctx, c, seq, first)
	}
}

// takeUpstream makes c, the seq-th data connection accepted, the relay's
// upstream once its handshake is through. Handshakes run side by side and
// end in any order: an upstream that was taken out of the cast (its
// connection accepted, its handshake slow) must not displace the one the
// server gave next, so a connection never replaces one accepted after it.
func (n *node) takeUpstream(ctx context.Context, c net.Conn, seq uint64, first chan<- StreamHeader) {
	// A node that is going away must not leave its upstream waiting for
	// the handshake's timeout.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	in, err := acceptStream(c)
	isFirst := false
	if err == nil {
		err = in.verify(n.frameKey)
	}
	if err == nil {
		isFirst, err = n.checkHeader(in.h, first)
	}
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
	up, ok := c.(upstream)
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
		err = in.answer(n.frameKey, pos)
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
func (n *node) checkHeader(h StreamHeader, first chan<- StreamHeader) (isFirst bool, err error) {
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
		close(n.headerSet)
		first <- h
		return true, nil
	}
	if h != *n.header {
		return false, errors.New("stream differs from the one this node has")
	}
	return false, nil
}

// reconnect finds the server again and resumes with it; nil if it cannot
// within the reconnect timeout.
func (n *node) reconnect(ctx context.Context) *session {
	deadline := time.Now().Add(n.cfg.ReconnectTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := n.dialServer(ctx, time.Until(deadline))
		if err != nil {
			return nil
		}
		n.mu.Lock()
		resume := Resume{Cast: n.welcome.Cast, Fingerprint: n.welcome.Fingerprint, Encoding: n.encoding,
			Pos: n.relay.Pos(), Target: n.target, Done: n.done}
		if n.header != nil {
			resume.FrameSize = int(n.header.FrameSize)
		}
		n.mu.Unlock()
		if n.done {
			resume.Digest = n.digest.String()
		}
		m, err := n.join(c, &resume, n.cfg.ServerTimeout)
		switch {
		case err != nil:
			n.log.Warn("rejoining the server failed", "err", err)
		case m.Type == MsgWelcome && m.Welcome.Resumed && m.Welcome.Encrypted == n.welcome.Encrypted:
			n.log.Info("back with the server", "pos", resume.Pos)
			return n.listen(c)
		default:
			n.log.Warn("server does not take this node back", "reply", m.Type, "reason", m.Reason)
		}
		c.Close()
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	return nil
}

// reportProgress sends progress until the returned stop is called; the
// server also takes it as a sign of life.
func (n *node) reportProgress() (stop func()) {
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
			p := Progress{Stream: n.counters.Stream.Load(), Written: n.counters.Written.Load(), Pos: n.relay.Pos()}
			n.send(Message{Type: MsgProgress, Progress: &p})
		}
	}()
	return func() { close(quit); <-finished }
}

// dialRetry dials addr until it answers or deadline passes.
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
