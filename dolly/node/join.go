package node

import (
	"context"
	"crypto/ecdh"
	"dolly/imaging/blockmap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/dial"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
	"dolly/imaging"
)

// join joins the cast on c: hello, key handshake, welcome; then it resolves and
// checks the target, measures the machine and says it is ready. It returns
// the node's place in the plan.
func (n *node) join(ctx context.Context, c *control.Conn, m control.Message) (*control.Assign, error) {
	switch m.Type {
	case control.MsgReject:
		return nil, fmt.Errorf("server refused this node: %s", m.Reason)
	case control.MsgAbort:
		return nil, fmt.Errorf("server aborted the cast: %s", m.Reason)
	case control.MsgWelcome:
	default:
		return nil, fmt.Errorf("joining: unexpected %s message", m.Type)
	}
	n.welcome = *m.Welcome
	if n.cfg.Key == nil && (len(m.Welcome.DataToken) != stream.TokenLen || len(m.Welcome.ProbeToken) != stream.TokenLen) {
		return nil, n.fail("the server gave no data tokens (an older server?): anyone could feed this node")
	}
	n.setTokens(m.Welcome)
	n.used = nil
	if len(n.welcome.UsedMap) > 0 {
		used, err := blockmap.Decode(n.welcome.UsedMap)
		if err == nil && used.Size != n.welcome.ImageSize {
			err = fmt.Errorf("a map of %d bytes for an image of %d", used.Size, n.welcome.ImageSize)
		}
		if err != nil {
			return nil, n.fail(fmt.Sprintf("the server's block map: %v", err))
		}
		n.used = &used
	}
	if n.cfg.Key != nil {
		signKey, err := control.CheckSignKey(n.cfg.ServerKey, n.welcome.Cast, &n.welcome)
		if err != nil {
			return nil, n.fail(err.Error())
		}
		n.frameKey = stream.NewFrameKey(n.cfg.Key, n.welcome.Cast, n.welcome.Encrypted)
		n.frameKey.Trust(signKey)
	}
	go n.acceptData(ctx)
	ready, err := n.checkTarget(ctx, c.LocalAddr())
	if err != nil {
		return nil, err
	}
	if err := c.Send(control.Message{Type: control.MsgReady, Ready: &ready}); err != nil {
		return nil, err
	}
	n.ready = ready
	go n.ctl.run(ctx)
	crowds := map[uint64]chan control.CrowdProbe{} // crowd probes set up, by id
	// A disk crowd's path waits for another order until the join ends;
	// the join ends only once every crowd probe has, so that none still
	// rewrites the target the cast is about to write.
	var probing sync.WaitGroup
	defer func() {
		for _, push := range crowds {
			close(push)
		}
		probing.Wait()
	}()
	for {
		m, err = n.ctl.next(ctx)
		switch {
		case err != nil:
			return nil, err
		case m.Type == control.MsgPing:
			// The server is there, while the others join or the admin
			// confirms.
		case m.Type == control.MsgNetProbe:
			go n.sendProbe(ctx, *m.NetProbe)
		case m.Type == control.MsgShare:
			n.share(*m.Share)
		case m.Type == control.MsgCrowdProbe && !m.CrowdProbe.Go:
			if _, dup := crowds[m.CrowdProbe.ID]; dup {
				break // set up already
			}
			push := make(chan control.CrowdProbe, 1)
			crowds[m.CrowdProbe.ID] = push
			set := *m.CrowdProbe
			probing.Go(func() { n.crowdProbe(ctx, set, push) })
		case m.Type == control.MsgCrowdProbe:
			if push, ok := crowds[m.CrowdProbe.ID]; ok {
				select {
				case push <- *m.CrowdProbe:
				default: // one order waits already: the server repeats itself
				}
			}
		case m.Type == control.MsgAssign:
			return m.Assign, nil
		default:
			return nil, fmt.Errorf("waiting for the cast: unexpected %s message", m.Type)
		}
	}
}

// meet connects to the server and says hello, and returns the connection
// with the server's answer. A server that drops the connection before it
// answers (one busy with strangers, or out of descriptors) is tried again,
// with a growing pause, until the join timeout.
func (n *node) meet(ctx context.Context) (*control.Conn, control.Message, error) {
	var deadline time.Time
	if n.cfg.JoinTimeout > 0 {
		deadline = time.Now().Add(n.cfg.JoinTimeout)
	}
	// left is what remains of the join timeout; 0 means no limit. A
	// server that takes the connection and never answers must not hold
	// the node past it either.
	left := func() time.Duration {
		if deadline.IsZero() {
			return 0
		}
		return max(time.Until(deadline), time.Millisecond)
	}
	pause := 100 * time.Millisecond
	for {
		c, err := n.dialServer(ctx, left())
		if err != nil {
			return nil, control.Message{}, err
		}
		m, err := n.hello(c, nil, left())
		if err == nil {
			return c, m, nil
		}
		c.Close()
		if !dropped(err) || ctx.Err() != nil || !deadline.IsZero() && time.Now().Add(pause).After(deadline) {
			return nil, m, fmt.Errorf("joining: %w", err)
		}
		n.log.Info("the server closed the connection before answering; trying again", "err", err, "pause", pause)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, m, ctx.Err()
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// dropped reports whether err is a connection the other end closed or
// reset, rather than an answer.
func dropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// checkTarget resolves the target and checks that the image fits and that
// the disk is not in use, then measures the machine unless told not to.
func (n *node) checkTarget(ctx context.Context, local net.Addr) (control.Ready, error) {
	n.target = n.cfg.Target
	fromServer := n.target == ""
	if fromServer {
		n.target = n.welcome.Target
	}
	if n.target == "" {
		return control.Ready{}, n.fail("no target: give the node -target PATH, or the server -target")
	}
	t, err := ResolveTarget(n.target)
	if err != nil {
		return control.Ready{}, n.fail(err.Error())
	}
	if fromServer {
		if err := serverMayName(t); err != nil {
			return control.Ready{}, n.fail(fmt.Sprintf("the server's target %q: %v", n.target, err))
		}
	}
	n.target = t
	// The disk this machine runs from is never overwritten; one that is
	// mounted or held by someone is, only if the admin insists.
	if err := imaging.CheckTargetUse(n.target); err != nil && !(n.cfg.Force && errors.Is(err, imaging.ErrTargetInUse)) {
		return control.Ready{}, n.fail(err.Error())
	}
	need := n.welcome.ImageSize
	if d := n.welcome.Disk; d != nil {
		need = min(need, d.MinSize) // a smaller disk that holds every partition
	}
	info, err := imaging.CheckTarget(n.target, need)
	if err != nil {
		return control.Ready{}, n.fail(err.Error())
	}
	n.targetSize = info.Size
	n.log.Info("joined", "image", n.welcome.Image, "size", n.welcome.ImageSize, "target", n.target)
	ready := control.Ready{Target: n.target, TargetSize: info.Size, Block: info.Block, CachedBy: info.CachedBy}
	if n.welcome.Probe && !n.cfg.NoProbe {
		var localIP net.IP
		if a, ok := local.(*net.TCPAddr); ok {
			localIP = a.IP
		}
		cfg := probe.Config{Name: n.cfg.Name, LocalIP: localIP, Buffered: n.cfg.Buffered, SkipDecoders: n.welcome.SkipDecoders,
			Budget: probe.CastBudget, DiskBudget: probe.CastDiskBudget,
			RelayHistory: n.history} // the cast's, already mapped
		if n.welcome.MeasureTarget {
			cfg.Target = n.target
		}
		p := probe.Run(ctx, cfg)
		for _, note := range p.Notes {
			n.log.Info("probe", "note", note)
		}
		if ready.Probe, err = json.Marshal(p.Probe); err != nil {
			return control.Ready{}, n.fail(fmt.Sprintf("encoding the probe: %v", err))
		}
	}
	return ready, nil
}

// serverMayName checks a target the server named: only a block device.
// A file is written only when the node's own -target names it, so that
// whoever speaks for the server cannot have a node create or overwrite a
// file of its choosing as root.
func serverMayName(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w (a node writes to a file only when its own -target names it)", err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return errors.New("not a block device: a node writes to a file only when its own -target names it")
	}
	return nil
}

// dialServer connects to the server, retrying with backoff for up to
// limit (0: forever).
func (n *node) dialServer(ctx context.Context, limit time.Duration) (*control.Conn, error) {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	c, err := dial.Backoff(ctx, n.cfg.Server, 100*time.Millisecond, 5*time.Second, func(attempt int, err error) {
		if attempt%10 == 0 {
			n.log.Info("waiting for dolly-server", "server", n.cfg.Server, "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cannot reach dolly-server at %s: %w", n.cfg.Server, err)
	}
	return control.NewConn(c), nil
}

// hello says who this node is (and, coming back, where its cast stands)
// and, in a keyed cast, runs the key handshake. It returns the server's
// first message after the handshake.
func (n *node) hello(c *control.Conn, resume *control.Resume, timeout time.Duration) (control.Message, error) {
	var nonce []byte
	var eph *ecdh.PrivateKey
	switch {
	case n.cfg.Key != nil:
		nonce = castkey.NewNonce()
	case n.cfg.ServerKey != nil:
		nonce, eph = castkey.NewNonce(), control.NewEnrollKey()
	}
	_, port, _ := net.SplitHostPort(n.ln.Addr().String())
	dataHost, _, _ := net.SplitHostPort(n.cfg.DataListen)
	if ip := net.ParseIP(dataHost); ip != nil && ip.IsUnspecified() {
		dataHost = ""
	}
	h := control.Hello{Version: stream.Version, Name: n.cfg.Name, MACs: probe.MACs(), Machine: probe.MachineID(), DataAddr: net.JoinHostPort(dataHost, port),
		Target: n.cfg.Target, Resume: resume, Nonce: nonce}
	if eph != nil {
		h.Enroll = eph.PublicKey().Bytes()
	}
	if err := c.Send(control.Message{Type: control.MsgHello, Hello: &h}); err != nil {
		return control.Message{}, err
	}
	if eph == nil {
		return control.NodeHandshake(c, n.cfg.Key, nonce, timeout)
	}
	m, secret, err := control.NodeEnroll(c, n.cfg.ServerKey, nonce, eph, timeout)
	if err != nil || m.Type != control.MsgWelcome {
		return m, err
	}
	// Admitted: the cast key comes sealed under the enrollment's secret.
	// From now on this node holds it, and comes back to a server with it.
	key, err := control.OpenCastKey(secret, m.Welcome.SealedKey)
	if err != nil {
		return m, err
	}
	n.cfg.Key = key
	n.log.Info("enrolled: the server proved its key and handed over the cast key")
	return m, nil
}

// share keeps the node to its part of a crowded machine, as the server
// says (control.Share): its threads, and how often its relay wakes.
func (n *node) share(s control.Share) {
	if s.WakeMillis > 0 {
		wake := min(time.Duration(s.WakeMillis)*time.Millisecond, maxWake)
		n.wake.Store(int64(wake))
		n.log.Info("the relay wakes for larger batches: the machine's cores hold the cast back", "wake", wake)
	}
	if n.cfg.SetProcs != nil && s.Procs >= 1 {
		procs := n.cfg.SetProcs(s.Procs)
		n.log.Info("sharing the machine's cores with other nodes", "procs", procs)
	}
}
