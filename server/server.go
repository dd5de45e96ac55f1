// Package server is dolly-server's coordinator: it registers nodes, checks
// their targets, plans the cast, streams the image as the source, shows
// progress and verifies every node's digest against the source's.
package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/dolly/relay"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/units"
)

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
	started bool // the plan is fixed; later joins are served apart
	over    bool // the cast is over; later joins are turned away
	// srcHold follows what holds the source's relay back; movedApart
	// names the nodes moved off the plan while it ran, and who serves
	// each (see slow.go).
	srcHold    holdWatch
	movedApart map[string]string
	// rewiredAt is when the tree was last rewired: a relay's waits from
	// before tell of children it may no longer have.
	rewiredAt time.Time
	// expect is the plan's prediction, stretch by stretch of the image;
	// its Rate is 0 when the model could not judge.
	expect  capacity.Result
	aborted string // why the cast was called off, for nodes that come later
	changed chan struct{}

	scanned chan struct{} // closed once the image's size and digest are known
	scanErr error
	profile probe.Profile // what the model needs of the image, once scanned
	// encodeCrowd times the source's encoder again among the nodes of its
	// machine; nil where the source does not compress on the fly.
	encodeCrowd *probe.EncodeCrowd

	probed chan struct{} // closed once the source's own probe is done
	probe  probe.Report

	// history is memory for the source relay's history, mapped while the
	// nodes join (see relay.NewHistory); the first source takes it.
	history []byte

	fingerprint string              // of the image, for nodes that come back
	mapNote     string              // what the image's block map leaves out, for the console
	usedMap     []byte              // that map, for the nodes' welcome
	freeShare   float64             // the share of the image that map calls free
	disk        *control.DiskLayout // the image's partition layout, if it is a whole disk's
	// signer signs every frame of a keyed cast; nodes get its public half
	// in their welcome.
	signer ed25519.PrivateKey
	// identity is the server's own key (castkey.Key.Identity): it signs
	// enrollments and the signer's public key.
	identity ed25519.PrivateKey
	// resume is set when the nodes bring a cast under way: a restarted
	// server takes it up where it was.
	resume *control.Resume

	// The cast as it runs.
	events chan castEvent
	src    *source
	tree   *castTree // who sends the stream to whom
	// netResults collects bandwidth probe reports while the network is
	// measured; nil otherwise.
	netResults *netWaiter
	strangers  strangers  // connections not yet admitted, per address
	netFigs    netFigures // what the bandwidth probes measured before the plan
	// sharing holds the nodes shareCores kept to one thread, with their
	// machine's cores, for the cast's own share (shareForCast); only the
	// run goroutine touches it.
	sharing map[*nodeState]int
	// crowdedHere says that this machine is one of them: its nodes and
	// the source are more hosts than it has cores (shareSourceCores).
	crowdedHere bool
	lastJoined  time.Time // when the last node joined, guarded by mu
	// joinedCPU is how this machine's CPUs had spent their time when the
	// last node joined, guarded by mu.
	joinedCPU probe.CPUTimes
	castNodes []*nodeState // every node of the cast
	// yielding are nodes served apart that leave their machine's cores to
	// the plan's nodes until those are done (control.Assign.Yield).
	yielding []*nodeState
}

// Run casts cfg.Image to the nodes that join and returns the summary. The
// error is nil only if every node verified its target.
func Run(ctx context.Context, cfg Config) (sum Summary, err error) {
	cfg.defaults()
	// The summary event comes last, whatever ended the cast (an image
	// that cannot be read too), once Run's goroutines are done.
	defer func() {
		if cfg.Events == nil {
			return
		}
		over := sum
		if over.Image == "" {
			over.Image = cfg.Image
		}
		r := NewReport(over)
		e := Event{Type: EvSummary, Time: time.Now(), Summary: &r}
		if err != nil {
			e.Text = err.Error()
		}
		cfg.Events(e)
	}()
	s := &Server{cfg: cfg, log: cfg.Logger, byName: map[string]*nodeState{}, changed: make(chan struct{}, 1),
		scanned: make(chan struct{}), probed: make(chan struct{}), events: make(chan castEvent, 1024), tree: newCastTree()}
	if _, err := rand.Read(s.cast[:]); err != nil {
		return Summary{}, err
	}
	if cfg.Key != nil {
		_, signer, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return Summary{}, err
		}
		s.signer = signer
		// The key file's key stays here, as the server's identity; the
		// cast runs under the key derived for it (castkey.Key.Shared).
		s.identity = cfg.Key.Identity()
		s.cfg.Key = cfg.Key.Shared()
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
	if s.mapNote, err = mapImage(img, cfg.AllBlocks); err != nil {
		return Summary{}, err
	}
	if s.disk, err = diskLayout(img, cfg.GrowLast); err != nil {
		return Summary{}, err
	}
	if m, err := nodesMap(img, cfg.AllBlocks); err != nil {
		return Summary{}, err
	} else if m != nil {
		if s.usedMap, err = m.Encode(maxUsedMap); err != nil {
			return Summary{}, fmt.Errorf("image %s: %w", img.Path, err)
		}
		s.freeShare = freeShare(*m)
	}
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
	wg.Add(1)
	go func() { defer wg.Done(); s.keepAlive(ctx) }()
	// The source relay's history is mapped while the image is scanned
	// (mapping it takes a while on a VM); the source's probe measures its
	// path through it, as the cast will. The probe is done before any node
	// is admitted (see probed), so before a source takes the history from
	// s.history.
	mapped := make(chan []byte, 1)
	go func() { mapped <- relay.NewHistory() }()
	go func() {
		s.scan(ctx)
		history := <-mapped
		s.mu.Lock()
		s.history = history
		s.mu.Unlock()
		// After the scan, so the probe times codecs on the image itself
		// and does not compete with the scan for the CPU; and before any
		// node is admitted (see handleNode), so that neither a node's probe
		// on this machine (the demo, an emulated lab) nor the network's
		// competes with it. Overlapping, the source's probe and a node's
		// slowed each other at random: the prediction of one cast in the
		// lab swung from 203 to 329 MB/s between runs.
		s.probeSelf(ctx, history)
	}()
	return s.run(ctx)
}

func (s *Server) run(ctx context.Context) (Summary, error) {
	sum := Summary{Image: s.cfg.Image}
	fmt.Fprintf(s.cfg.Out, "dolly-server: image %s (%s, %s stored), listening on %s\n",
		s.cfg.Image, s.img.Encoding, units.FormatBytes(s.img.StreamSize), s.ln.Addr())
	if s.mapNote != "" {
		fmt.Fprintf(s.cfg.Out, "  %s\n", s.mapNote)
	}
	if note := packNote(s.img, packWorthIt); note != "" {
		fmt.Fprintf(s.cfg.Out, "  %s\n", note)
	}
	if !s.img.Encoding.Compressed() {
		s.printDisk() // a compressed image's, once it is scanned
	}
	s.emit(Event{Type: EvListening, Image: &ImageInfo{Path: s.cfg.Image, Bytes: s.img.Size, StreamBytes: s.img.StreamSize,
		Encoding: s.img.Encoding.String(), Listen: s.ln.Addr().String(), Nodes: s.cfg.Nodes}})
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
	s.mu.Lock()
	if !s.lastJoined.IsZero() {
		sum.JoinParts.Probes = time.Since(s.lastJoined)
	}
	s.mu.Unlock()
	var choice Choice
	if s.resume != nil {
		choice, err = s.resumePlan(ready)
		if err != nil {
			s.abortAll(err.Error())
			return s.summary(sum), err
		}
	} else {
		// Before the network and the crowds are measured (a resumed
		// cast's nodes are casting already, and measure nothing).
		s.shareCores(ready)
		var figs netFigures
		var notes []string
		if s.cfg.NetProbe > 0 && len(ready) > 0 && (s.cfg.probeLoopback || !allLoopback(ready)) {
			fmt.Fprintf(s.cfg.Out, "measuring the network: the source to all %d nodes at once, then each to the next\n", len(ready))
			t := time.Now()
			figs, notes = s.measureNetwork(ctx, ready)
			sum.JoinParts.Network = time.Since(t)
		}
		// A shared disk is measured where it may bind the plan. The crowds
		// only slow a plan, so the plan judged without them is at least as
		// near its disk as the one chosen with them.
		disks := s.cfg.measureDisks
		if !disks && len(s.sharedDisks(ready)) > 0 {
			disks = sharedDiskMayBind(s.choose(ctx, ready, figs).Result)
		}
		var crowdNotes []string
		t := time.Now()
		plan := func(crowds map[string]crowd, disks map[string]diskCrowd) capacity.Result {
			f := figs
			f.crowds, f.disks = crowds, disks
			return s.choose(ctx, ready, f).Result
		}
		var shared sharedFigures
		shared, crowdNotes = s.measureShared(ctx, ready, disks, s.nodesMayDecode(), plan)
		figs.crowds, figs.disks, figs.decoders = shared.crowds, shared.disks, shared.decoders
		figs.encodeSlowdown = shared.encodeSlowdown
		if len(crowdNotes) > 0 { // measured something
			sum.JoinParts.Shared = time.Since(t)
		}
		notes = append(notes, crowdNotes...)
		s.mu.Lock()
		joined := s.joinedCPU
		s.mu.Unlock()
		if joined.Total() > 0 {
			if note := joinStealNote(probe.ReadCPUTimes().Sub(joined)); note != "" {
				notes = append(notes, note)
			}
		}
		choice = s.choose(ctx, ready, figs)
		s.netFigs = figs
		choice.Notes = append(notes, choice.Notes...)
	}
	sum.Plan = choice
	s.mu.Lock()
	if choice.Modeled {
		s.expect = choice.Result
	}
	if !s.lastJoined.IsZero() {
		sum.JoinPhase = time.Since(s.lastJoined)
	}
	s.mu.Unlock()
	plan := s.bind(choice, ready)
	printPreview(s.cfg.Out, choice)
	s.printPlan(plan, choice)
	s.emit(Event{Type: EvPlan, Plan: s.planInfo(plan, choice)})
	if !s.confirmed() {
		ok, err := s.confirm(ready)
		if err != nil || !ok {
			s.abortAll("cancelled by the operator")
			return s.summary(sum), errors.New("cast cancelled")
		}
	}
	start := time.Now()
	sum.Started = true
	w := s.newWatch(choice)
	cpu, machine := probe.ProcessCPU(), probe.ReadCPUTimes()
	digest, err := s.runCast(ctx, plan, w)
	s.log.Debug("cast done", "cpu", probe.ProcessCPU()-cpu, "took", time.Since(start))
	if here, nodesCPU, reported := s.nodesHere(ready); here > 0 {
		use := MachineUse{Hosts: 1 + here, Cores: runtime.NumCPU(), CPU: probe.ReadCPUTimes().Sub(machine)}
		if reported {
			use.Processes = probe.ProcessCPU() - cpu + nodesCPU
		}
		sum.ThisMachine = &use
	}
	if w != nil {
		sum.Replans = w.said
	}
	sum.Digest = digest
	sum.Elapsed = time.Since(start)
	if s.src != nil {
		sum.StreamBytes, sum.ResumedBytes = s.src.sent.Load(), s.src.skip
	}
	sum = s.summary(sum)
	if m := sum.ThisMachine; m != nil && sum.ranAsPlanned() {
		m.Modeled = modeledCPU(choice, m.Hosts, sum.Size)
	}
	s.printSummary(sum)
	if err != nil {
		return sum, err
	}
	if sum.Verified != len(sum.Nodes) {
		return sum, fmt.Errorf("%w: %d of %d verified", ErrNotAllVerified, sum.Verified, len(sum.Nodes))
	}
	return sum, nil
}

// signal wakes whoever waits for the nodes to change: the roll call, the
// cast loop.
func (s *Server) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// peerTimeout bounds each wait for a peer's answer outside the cast: a
// hello, a proof, a node's data listener.
const peerTimeout = 30 * time.Second

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

// confirmed reports whether the admin has agreed in advance to overwrite
// the targets: with -yes, or by starting the server where nobody can be
// asked. Only then may nodes write to a target before the cast (their
// probe of its write rate writes back what it read).
func (s *Server) confirmed() bool { return s.cfg.Yes || !s.cfg.Interactive }

// pingEvery is how often keepAlive tells the waiting nodes the server is
// there: well inside a node's -server-timeout (15 s by default), and as
// often as the server itself wants to hear from nodes (half its
// NodeTimeout).
func (s *Server) pingEvery() time.Duration {
	return max(min(5*time.Second, s.cfg.NodeTimeout/2), 100*time.Millisecond)
}

// keepAlive pings every node that is ready and waits for the cast (for
// the others to join, the network to be measured, the admin to confirm)
// until ctx ends: a node takes a server it has not heard from for its
// -server-timeout for lost, and PCs that boot over minutes wait that long.
// Once the cast runs, checkNodes pings the nodes of the cast.
func (s *Server) keepAlive(ctx context.Context) {
	t := time.NewTicker(s.pingEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var conns []*control.Conn
		for _, n := range s.nodes {
			if n.status == stReady && n.welcomed {
				conns = append(conns, n.conn)
			}
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.Send(control.Message{Type: control.MsgPing})
		}
	}
}
