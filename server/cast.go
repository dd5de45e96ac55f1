package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/imaging"
	"dolly/internal/units"
)

// castPlan is a logical topology with its vertices bound to nodes: vertex 0
// is the source, vertex v is nodes[v-1]. It is the plan as it started; the
// tree the cast runs on (Server.tree) changes as nodes fail.
type castPlan struct {
	tree  capacity.Tree
	nodes []*nodeState
	send  imaging.Encoding // how the stream travels
	// apart are the nodes served apart, each by a node of the plan at its
	// own pace.
	apart []apartLink
	// wake is how long the relays of crowded machines gather their
	// upstream's stream before they wake (see wakeFor); 0: their default.
	wake time.Duration
}

// apartLink is a node served apart and its upstream: the plan's vertex
// up, which serves it at its own pace, or (up < 0) the node served apart
// before it in its chain, from.
type apartLink struct {
	node *nodeState
	up   int
	from *nodeState
	rate float64 // predicted
}

// bind ties the chosen plan's vertices to the nodes.
func (s *Server) bind(ch Choice, ready []*nodeState) castPlan {
	byName := map[string]*nodeState{}
	for _, n := range ready {
		byName[n.name] = n
	}
	p := castPlan{tree: ch.Result.Plan.Tree, send: ch.Send, wake: wakeFor(ch)}
	vertex := map[string]int{}
	for v, name := range ch.Result.Plan.Hosts {
		vertex[name] = v
		if v > 0 {
			p.nodes = append(p.nodes, byName[name])
		}
	}
	for _, a := range ch.Apart {
		l := apartLink{node: byName[a.Name], up: -1, rate: a.Rate}
		if a.Paced {
			l.up = vertex[a.From]
		} else {
			l.from = byName[a.From]
		}
		p.apart = append(p.apart, l)
	}
	return p
}

// all is every node of the cast: the plan's, then those served apart.
func (p castPlan) all() []*nodeState {
	out := slices.Clone(p.nodes)
	for _, a := range p.apart {
		out = append(out, a.node)
	}
	return out
}

func (p castPlan) name(v int) string {
	if v == 0 {
		return SourceName
	}
	return p.nodes[v-1].name
}

// runCast streams the image along the plan, keeps the tree whole as nodes
// fail, and collects the verdicts. It returns the source's digest.
// A watch, if given, holds the cast against its prediction and re-plans.
func (s *Server) runCast(ctx context.Context, p castPlan, w *watch) (imaging.Digest, error) {
	defer func() {
		s.mu.Lock()
		s.over = true
		s.mu.Unlock()
	}()
	s.mu.Lock()
	now := time.Now()
	s.tree = plantTree(p.tree, p.nodes)
	for _, a := range p.apart {
		if a.up >= 0 {
			s.tree.addPaced(s.tree.vertexAt(p.nodes, a.up), a.node)
		} else {
			s.tree.add(s.tree.at[a.from], a.node)
		}
	}
	for _, n := range p.all() {
		n.lastHeard, n.lastMoved = now, now
		if n.status == stReady {
			n.status, n.start = stCasting, now
		}
	}
	s.castNodes = p.all()
	for _, n := range s.nodes {
		if n.resumed && n.status == stDone && !slices.Contains(s.castNodes, n) {
			s.castNodes = append(s.castNodes, n) // has it all: awaits its verdict
		}
	}
	skip := int64(-1)
	for _, n := range s.tree.sourceChildren() {
		if skip < 0 || n.pos < skip {
			skip = n.pos
		}
	}
	s.mu.Unlock()

	// The source's relay runs until the cast is over.
	srcCtx, stopSource := context.WithCancel(ctx)
	defer stopSource()
	src, err := s.newSource(srcCtx, p.send, max(skip, 0))
	if err != nil {
		s.abortAll(err.Error())
		return imaging.Digest{}, err
	}
	if skip > 0 {
		fmt.Fprintf(s.cfg.Out, "every node has the first %s of the stream already: sending the rest\n", units.FormatBytes(skip))
	}
	s.src = src
	srcDone := make(chan error, 1)
	go func() { srcDone <- src.run(srcCtx, max(skip, 0), s.sourceKidsNow) }()

	s.shareForCast(p.send, p.wake)
	defer s.shareSourceCores(p.send)()
	kids := p.tree.ChildLists()
	assign := func(n *nodeState, a control.Assign) {
		if err := n.conn.Send(control.Message{Type: control.MsgAssign, Assign: &a}); err != nil {
			s.post(castEvent{kind: evDown, node: n, reason: fmt.Sprintf("could not send it its place: %v", err)})
		}
	}
	for v := 1; v < len(kids); v++ {
		a := control.Assign{Upstream: p.name(p.tree.Parent[v]), Encoding: p.send.String()}
		for _, w := range kids[v] {
			a.Children = append(a.Children, s.peer(p.nodes[w-1]))
		}
		for _, ap := range p.apart {
			if ap.up == v {
				a.Children = append(a.Children, s.peer(ap.node))
			}
		}
		assign(p.nodes[v-1], a)
	}
	s.yielding = nil
	here := s.sourceMachine(p.all())
	for _, ap := range p.apart {
		a := control.Assign{Encoding: p.send.String(), Yield: sharesMachine(ap.node, here, p.nodes)}
		if a.Yield {
			s.yielding = append(s.yielding, ap.node)
		}
		if ap.up >= 0 {
			a.Upstream = p.name(ap.up)
		} else {
			a.Upstream = ap.from.name
		}
		for _, c := range p.apart {
			if c.from == ap.node {
				a.Children = append(a.Children, s.peer(c.node))
			}
		}
		assign(ap.node, a)
	}
	if len(s.yielding) > 0 {
		fmt.Fprintf(s.cfg.Out, "served apart on a machine the plan runs on, %s write as their buffers fill, and catch up once the plan's nodes are done\n",
			joinNames(s.yielding, 4))
	}

	view := newProgressView(s.cfg.Out, s.cfg.Interactive, s.cfg.ProgressEvery, s.img.Size)
	// Check often enough that a silent node is noticed within a fraction
	// of the node timeout past it.
	tick := time.NewTicker(min(max(s.cfg.NodeTimeout/8, 50*time.Millisecond), time.Second))
	defer tick.Stop()
	draw := time.NewTicker(view.interval())
	defer draw.Stop()
	s.emit(Event{Type: EvStarted})
	var report <-chan time.Time // progress events
	if s.cfg.Events != nil {
		t := time.NewTicker(eventEvery)
		defer t.Stop()
		report = t.C
	}
	finish := func() {
		view.finish(s.snapshot(), src.sent.Load())
		s.emitProgress(src.sent.Load())
	}
	var watchTick <-chan time.Time
	if w != nil {
		s.check(ctx, w, time.Now()) // where every node starts from
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		watchTick = t.C
	}
	var digest imaging.Digest
	haveDigest, sourceDone := false, false
	for {
		select {
		case err := <-srcDone:
			srcDone = nil
			if err != nil && ctx.Err() == nil {
				s.abortAll(err.Error())
				finish()
				return digest, err
			}
		case digest = <-src.digest:
			haveDigest, sourceDone = true, true
		case e := <-s.events:
			s.handleEvent(ctx, e)
		case <-s.changed:
		case <-tick.C:
			s.checkNodes(time.Now())
			s.moveSlowApart(ctx, w, time.Now())
		case <-draw.C:
			view.draw(s.snapshot(), src.sent.Load())
		case <-report:
			s.emitProgress(src.sent.Load())
		case now := <-watchTick:
			s.check(ctx, w, now)
		case <-ctx.Done():
			s.abortAll("dolly-server was interrupted")
			finish()
			return digest, ctx.Err()
		}
		if haveDigest {
			s.sendVerdicts(digest)
		}
		s.endYield()
		if sourceDone && s.allFinished() {
			finish()
			return digest, nil
		}
	}
}

// checkNodes takes out nodes that went silent or stopped moving while the
// stream was there for them, and tells the rest the server is alive.
func (s *Server) checkNodes(now time.Time) {
	var down []castEvent
	s.mu.Lock()
	for _, n := range s.castNodes {
		if s.tree.placeOf(n) != inTree || n.finished() && n.status != stDone {
			continue
		}
		if n.status == stDone && n.verdict == verified {
			continue
		}
		if silent := now.Sub(n.lastHeard); silent > s.cfg.NodeTimeout {
			down = append(down, castEvent{kind: evDown, node: n, reason: fmt.Sprintf("no word from it for %s", formatDuration(silent))})
			continue
		}
		up := s.tree.upstream(n)
		p := up.node // nil for the source
		if !up.isSource() && p.gone(now, s.cfg.NodeTimeout) && n.status == stCasting && n.pos < p.pos {
			// Its upstream went away after its verdict before the end of
			// the stream reached n. One that fell silent lost its power
			// or its cable: what has not come by now will not. One that
			// said goodbye waited until n's kernel had it all, so n is
			// only slow unless it stalls. p's children go further up.
			wait := s.cfg.NodeTimeout
			if p.left {
				wait = s.cfg.StallTimeout
			}
			if now.Sub(n.lastMoved) > wait {
				down = append(down, castEvent{kind: evDown, node: p, reason: fmt.Sprintf("went away before %s had the whole stream", n.name)})
				continue
			}
		}
		if n.waiting {
			continue // served apart, its stream starts once the source's link is free
		}
		ahead, complete := s.src.sent.Load(), s.src.ended.Load()
		if !up.isSource() {
			ahead, complete = p.pos, p.status == stDone
		}
		// Far behind, or behind an upstream that has it all: near the end
		// less than stallMargin may be missing, and it will not come.
		behind := ahead - n.pos
		if n.status == stCasting && now.Sub(n.lastMoved) > s.cfg.StallTimeout && (behind > stallMargin || complete && behind > 0) {
			down = append(down, castEvent{kind: evDown, node: n, reason: fmt.Sprintf("stalled: no progress for %s while its upstream was %s ahead",
				formatDuration(now.Sub(n.lastMoved)), units.FormatBytes(behind))})
		}
	}
	conns := make([]*control.Conn, 0, len(s.castNodes))
	for _, n := range s.castNodes {
		if (!n.finished() || n.status == stDone) && n.welcomed {
			conns = append(conns, n.conn)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Send(control.Message{Type: control.MsgPing})
	}
	for _, e := range down {
		s.post(e)
	}
}

// sharesMachine reports whether n runs on a machine with the source (whose
// machine is source) or any of the plan's nodes: its decoding and writing
// would take their cores.
func sharesMachine(n *nodeState, source string, plan []*nodeState) bool {
	if n.machine == "" {
		return false
	}
	return n.machine == source || slices.ContainsFunc(plan, func(m *nodeState) bool { return m.machine == n.machine })
}

// endYield tells the nodes that yield to the plan's that they may catch up,
// once no node of the plan (the tree but the nodes served apart) casts any
// more.
func (s *Server) endYield() {
	s.mu.Lock()
	if len(s.yielding) == 0 {
		s.mu.Unlock()
		return
	}
	for _, v := range s.tree.planned() {
		if v.node != nil && v.node.status == stCasting {
			s.mu.Unlock()
			return
		}
	}
	// A node that misses this (its connection lost meanwhile) reads as
	// its history fills, and all of it once its stream ends.
	conns := make([]*control.Conn, 0, len(s.yielding))
	for _, n := range s.yielding {
		conns = append(conns, n.conn)
	}
	s.yielding = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.Send(control.Message{Type: control.MsgCatchUp})
	}
	s.log.Info("the plan's nodes are done: the nodes served apart catch up", "nodes", len(conns))
}

// stallMargin is how far an upstream must be ahead before a node that
// does not move counts as stalled: less is data in flight.
const stallMargin = 4 << 20

// sendVerdicts compares each reported digest with the source's and tells
// the node. A node whose target is verified may reboot at once.
func (s *Server) sendVerdicts(digest imaging.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.castNodes {
		if n.status != stDone || n.told || n.reason != "" {
			continue
		}
		n.told = true
		r := control.Result{OK: n.digest == digest.String(), After: s.cfg.After}
		s.log.Info("verdict", "node", n.name, "ok", r.OK)
		if r.OK {
			n.verdict = verified
			r.Message = "target verified"
			if s.cfg.Verified != nil {
				s.cfg.Verified(n.name, n.macs)
			}
			s.emit(Event{Type: EvVerified, Node: n.name})
		} else {
			n.verdict = rejected
			n.reason = fmt.Sprintf("digest %.12s differs from the source's %s", n.digest, digest.Short())
			n.status = stFailed
			r.Message = n.reason
			s.emit(Event{Type: EvRejected, Node: n.name, Text: n.reason})
		}
		if err := n.conn.Send(control.Message{Type: control.MsgResult, Result: &r}); err != nil {
			s.log.Warn("sending verdict", "node", n.name, "err", err)
		}
	}
}

// allFinished reports whether every node of the cast has its verdict or
// has failed.
func (s *Server) allFinished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.castNodes {
		if !n.finished() || (n.status == stDone && n.verdict != verified) {
			return false
		}
	}
	// A node that joined late and is still checking its target is about
	// to be served.
	for _, n := range s.nodes {
		if n.late && (n.status == stJoined || n.status == stReady) {
			return false
		}
	}
	return true
}

// snapshot copies what the progress view needs.
func (s *Server) snapshot() []nodeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]nodeView, len(s.castNodes))
	for i, n := range s.castNodes {
		v := nodeView{name: n.name, status: n.status, written: n.progress.Written, rate: n.rate, reason: n.reason, verified: n.verdict == verified}
		end := now
		if !n.end.IsZero() {
			end = n.end
		}
		v.elapsed = end.Sub(n.start)
		out[i] = v
	}
	return out
}

// sourceKidsNow lists the source's children on the main stream, for the
// source to attach before its stream starts.
func (s *Server) sourceKidsNow() []*nodeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tree.sourcePlanned()
}
