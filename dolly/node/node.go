// Package node is the node agent: it joins a cast, checks and resolves its
// target, and then, until the server's verdict, receives the stream, writes
// it to the target and relays it to its children. A node that loses its
// server keeps its data path and what it has, reconnects, and goes on.
package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/relay"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/imaging/blockmap"
)

// Config configures a node.
type Config struct {
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
	// SpoolDir is where the node keeps the stream for a child it serves
	// at that child's own pace (a slower node); the system's temporary
	// directory if empty.
	SpoolDir string
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
	Key castkey.Key
	// ServerKey, for a node without a Key (a netbooted one), is the
	// server's public key: the node enrolls, joins only a server that
	// signs as it, and is handed the cast key if the server admits it.
	ServerKey ed25519.PublicKey
	// SetProcs, if set, is how the node keeps to its part of a machine
	// it shares with more nodes than it has cores (control.Share): the
	// command sets GOMAXPROCS, a setting of the whole process, to at most
	// the machine's cores. It returns the threads it set.
	SetProcs func(procs int) int
	Logger   *slog.Logger
}

func (c *Config) defaults() {
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

// Result is what a node did.
type Result struct {
	Target  string
	Written int64
	Digest  imaging.Digest
	Elapsed time.Duration
	// After is the server's after-cast action for netbooted nodes.
	After string
	// Started says the node took its place in a cast: from then on its
	// target may have been written. Run's errors before that (no server,
	// refused, a target it may not write) changed nothing.
	Started bool
}

// node is one run of the node agent.
type node struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener // data connections from upstreams
	ctl *session     // the control connection, across lost servers

	welcome control.Welcome
	// ready is what the node said when it joined; it says it again to a
	// server it comes back to, once it has taken that server's welcome.
	ready control.Ready
	// tokens are this node's from its latest welcome (unkeyed casts): an
	// upstream must prove it knows the data token, a prober the probe one.
	tokens atomic.Pointer[tokens]
	// frameKey checks (and decrypts) the frames of a keyed cast; nil in
	// an unkeyed one.
	frameKey *stream.FrameKey
	target   string
	// targetSize is the target's size when the node joined (0: a file
	// it will create).
	targetSize int64
	// used is the image's block map from the welcome: free ranges need
	// not be zeroed. nil: every zero run is zeroed.
	used    *blockmap.Map
	probed  probesReceived // the bandwidth probes this node received
	relay   *relay.Relay
	history []byte // memory for the relay's history, mapped (relay.NewHistory)
	// historyLent says which parts of history a crowd probe has on loan
	// (lendHistory).
	historyLent [2]atomic.Bool
	// wake is what the cast's relay gathers of its upstream's stream
	// before it wakes (relay.Config.WakeDelay), as the server told a node
	// of a crowded machine whose cores hold the cast back
	// (control.Share); 0: the relay's default.
	wake atomic.Int64
	// sums are the payloads' CRCs, computed as the relay takes them in;
	// started with the first header.
	sums     *stream.PayloadSums
	encoding string // how the stream travels, from the assignment
	counters stream.Counters
	start    time.Time
	// cpuAtStart is the process's CPU time when the cast began.
	cpuAtStart time.Duration
	// initial are the children of the first assignment, attached before
	// the stream starts flowing.
	initial []control.Peer

	// casting is closed once the cast is on: the relay takes upstreams.
	casting chan struct{}
	// The stream's header, from the first upstream; headerSet is closed
	// once it is known, and firstHeader hands it to the cast loop. mu also
	// guards tg.
	mu          sync.Mutex
	header      *stream.StreamHeader
	headerSet   chan struct{}
	firstHeader chan stream.StreamHeader
	upstreams   upstreamOrder
	tg          *imaging.Target // the opened target, closed when the node ends

	out outcome
}

// outcome is what the node has made of the stream. The cast loop alone
// writes it; the session reads it when it resumes with a server.
type outcome struct {
	mu     sync.Mutex
	done   bool // the receiver has the whole stream (and wrote it, or failed)
	digest imaging.Digest
}

func (o *outcome) set(d imaging.Digest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done, o.digest = true, d
}

func (o *outcome) get() (done bool, d imaging.Digest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done, o.digest
}

// gcPercent is the collector's target while a node runs (see Run).
const gcPercent = 10

// Run joins the cast at cfg.Server, writes the image to the target,
// forwards it to the node's children and returns once the server has
// confirmed the target verified. Any other outcome is an error. When the
// server is lost during the cast the node keeps its data path and what it
// has, reconnects, and goes on with the server it finds. While it runs,
// the process's garbage collection target (debug.SetGCPercent) is 10%,
// for a node is its process's one job (dolly, dolly-init).
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	if cfg.Key != nil {
		// The key file's key: the server's identity follows from it, and
		// the cast runs under the key derived for it.
		cfg.ServerKey = cfg.Key.Identity().Public().(ed25519.PublicKey)
		cfg.Key = cfg.Key.Shared()
	}
	// Most of a node's heap is the relay's history: 32 MiB, live for the
	// whole cast and never scanned (it holds no pointers). The collector's
	// default pacing lets garbage grow as large as the live heap before it
	// runs, so a long cast's trickle of garbage piled up toward another
	// 32 MiB: a node's memory grew with the image. Collecting at a tenth
	// bounds it, and costs little: a collection marks only the small rest.
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	// The relay's history is made before the node joins, so that neither
	// the cast nor the join pays for its fresh pages (see
	// relay.NewHistory); the relay probe runs through it too.
	n := &node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), casting: make(chan struct{}),
		headerSet: make(chan struct{}), firstHeader: make(chan stream.StreamHeader, 1),
		history: relay.NewHistory()}
	ln, err := net.Listen("tcp", cfg.DataListen)
	if err != nil {
		return Result{}, fmt.Errorf("data listener on %s: %w", cfg.DataListen, err)
	}
	n.ln = ln
	defer ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := n.run(ctx)
	n.mu.Lock()
	if n.tg != nil {
		n.tg.Close()
	}
	n.mu.Unlock()
	return res, err
}

func (n *node) run(ctx context.Context) (Result, error) {
	c, m, err := n.meet(ctx)
	if err != nil {
		return Result{}, err
	}
	n.ctl = newSession(n, c)
	defer n.ctl.close()
	stop := context.AfterFunc(ctx, n.ctl.close)
	defer stop()
	a, err := n.join(ctx, c, m)
	if err != nil {
		return Result{}, err
	}
	res, err := n.cast(ctx, a)
	res.Started = true
	return res, err
}

// fail tells the server why this node cannot go on and returns that as an
// error.
func (n *node) fail(reason string) error {
	n.ctl.send(control.Message{Type: control.MsgFail, Reason: reason})
	return errors.New(reason)
}

// tokens are a node's data and probe tokens.
type tokens struct{ data, probe []byte }

// setTokens takes the tokens of a welcome.
func (n *node) setTokens(w *control.Welcome) {
	n.tokens.Store(&tokens{data: w.DataToken, probe: w.ProbeToken})
}

// token is the token a peer opening connection c must prove it knows:
// the probe token for a bandwidth probe, else the data token; nil in a
// keyed cast.
func (n *node) token(probe bool) []byte {
	t := n.tokens.Load()
	switch {
	case t == nil:
		return nil
	case probe:
		return t.probe
	}
	return t.data
}

func (n *node) result() Result {
	_, d := n.out.get()
	return Result{Target: n.target, Written: n.counters.Written.Load(), Digest: d, Elapsed: time.Since(n.start)}
}
