package server

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"dolly/capacity"
	"dolly/dolly/castkey"
	"dolly/dolly/stream"
)

// Config configures one cast.
type Config struct {
	Image string // image file or block device
	// Shape is the operator's topology; empty lets the capacity model pick.
	Shape    capacity.Kind
	Fanout   int      // for trees
	Compress Compress // whether the stream may be compressed (default auto)
	// AllBlocks sends every block of a raw image as stored (-zero-free):
	// each target equals the image. By default only the blocks its file
	// systems use are read and sent (see imaging.Image.UseMap), and the
	// nodes discard the free ones where the disk can, else leave them.
	AllBlocks bool
	// GrowLast has each node grow the last partition of a whole disk's
	// image to the end of its disk, and the file system in it where it
	// can; the image must hold an MBR or GPT.
	GrowLast bool
	// Topology describes the network for the capacity model; nil assumes
	// every host on one switch at its probed link speed.
	Topology *capacity.Topology
	// NoProbe skips measuring this machine (the model then lacks the
	// source's figures).
	NoProbe bool
	// SetProcs, if set, sets how many threads run the process's Go code
	// at once and returns the setting before (runtime.GOMAXPROCS): the
	// source keeps to fewer on a machine its nodes crowd (see
	// shareSourceCores). The setting is the whole process's, so only
	// its command sets it.
	SetProcs func(procs int) int
	// NetProbe is how long each bandwidth probe of the network runs before
	// the plan (the source to all nodes, then each node to the next); 0
	// skips them, and the model then knows links only by their NICs.
	NetProbe time.Duration
	// probeLoopback runs the bandwidth probes over loopback too, where
	// they measure no link (for tests of the probes themselves).
	probeLoopback bool
	// measureDisks measures a shared disk in a crowd whatever the plan,
	// and twice, as one that binds it, for tests on machines whose disk
	// would not bind.
	measureDisks bool
	// NoReplan keeps the plan the model chose to the end, however the
	// cast runs against its prediction.
	NoReplan bool
	Nodes    int    // start once this many nodes have joined (0: ask on a terminal)
	Target   string // default target for nodes that name none
	Listen   string // control address, host:port

	MaxRate   float64 // source sending rate limit in bytes/s (0: none)
	FrameSize int
	Yes       bool // do not ask for confirmation
	// Key is the cast key: only nodes that prove they know it join, and
	// every frame carries a tag under it. Encrypt also encrypts the
	// frames (a keyed cast only).
	Key     castkey.Key
	Encrypt bool
	// Allow admits nodes that hold no key but the server's public key (a
	// netbooted PC enrolls: see control.ServerEnroll) by name or MAC,
	// patterns as path.Match takes them ("pc*", "52:54:00:*"). A name or a
	// MAC is what the node says it is: an allow-list keeps out the
	// machines that should not be reimaged, not an attacker.
	Allow []string
	// Admit, if set, says why a node of this name and these MACs may not
	// join ("" admits it): the machines a cast is for (dolly-server
	// -serve's groups). Like Allow it trusts what the node says it is.
	Admit func(name string, macs []string) string
	// After is what netbooted nodes do once verified: "reboot",
	// "poweroff", "shell" or "" (the node program just exits).
	After string
	// Verified, if set, is told of every node whose target is verified,
	// with the MAC addresses its hello listed, before the node is. It
	// runs with the server's state locked: it must not call the server.
	Verified func(node string, macs []string)

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
	// Events, if set, is told each step of the cast as it happens, for
	// whoever watches it besides Out: -o json, the status page, /metrics.
	// It may run with the server's state locked: it must return at once
	// and must not call the server.
	Events func(Event)
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
