package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
)

// serveNode reads n's messages on its control connection c, which was
// welcomed, until the connection ends.
func (s *Server) serveNode(n *nodeState, c *control.Conn) {
	for {
		m, err := c.Recv(0)
		if err != nil {
			s.lostNode(n, c, err)
			return
		}
		s.handleMessage(n, c, m)
	}
}

// handleMessage acts on one message of a node's control connection c.
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
		n.cachedBy = m.Ready.CachedBy
		n.probe = nil
		if len(m.Ready.Probe) > 0 {
			var p capacity.Probe
			if err := json.Unmarshal(m.Ready.Probe, &p); err != nil {
				s.log.Warn("node's probe is unreadable; planning without it", "node", n.name, "err", err)
			} else {
				n.probe = &p
			}
		}
		// The figures the model plans from, for -v: what a preview that
		// misses was given.
		s.log.Info("node ready", "node", n.name, "target", n.target, "probe", string(m.Ready.Probe))
		if n.late {
			s.post(castEvent{kind: evLate, node: n})
		}
	case control.MsgProgress:
		n.observe(*m.Progress, now)
		n.starved = m.Progress.Starved
		if m.Progress.HeldBy != n.heldBy {
			n.heldBy, n.heldSince = m.Progress.HeldBy, now
		}
	case control.MsgDone:
		if n.status != stCasting {
			return
		}
		n.status, n.end, n.digest = stDone, now, m.Done.Digest
		n.castCPU = time.Duration(m.Done.CPU * float64(time.Second))
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
	case control.MsgNetResult:
		if s.netResults != nil {
			s.netResults.report(*m.NetResult)
		}
		return
	default:
		return
	}
	s.signal()
}

// castEvent is something the cast loop must act on: the control
// connections report them, the loop's own checks find them.
type castEvent struct {
	kind   eventKind
	node   *nodeState
	child  string // for attach-failed and child-lost
	reason string
}

type eventKind int

const (
	evDown         eventKind = iota // the node is out of the cast: rewire around it
	evAttachFailed                  // node could not serve child: the source takes it
	evChildLost                     // node lost its connection to child
	evReturned                      // a node of this cast came back: append it
	evLate                          // a node joined after the plan and is ready: serve it apart
)

// post hands e to the cast loop without waiting.
func (s *Server) post(e castEvent) {
	select {
	case s.events <- e:
	default:
		s.log.Warn("cast events overflow", "event", e.kind, "node", e.node.name)
	}
}

// handleEvent acts on one event of the cast.
func (s *Server) handleEvent(ctx context.Context, e castEvent) {
	switch e.kind {
	case evDown:
		s.removeNode(ctx, e.node, e.reason)
	case evAttachFailed:
		s.handOver(ctx, e.node, e.child, e.reason)
	case evChildLost:
		// A parent that cannot reach its child: the child is taken out
		// unless it has finished (it then needs nothing more). One served
		// at its pace may have outgrown its parent's spool: the source
		// serves it once its link is free (if the child is gone, that
		// fails, and it is taken out).
		s.mu.Lock()
		c := s.byName[e.child]
		lost := c != nil && s.tree.feeds(e.node, c) && !c.finished()
		paced := lost && s.tree.paced(c)
		s.mu.Unlock()
		switch {
		case paced:
			s.handOver(ctx, e.node, e.child, e.reason)
		case lost:
			s.removeNode(ctx, c, fmt.Sprintf("%s could not send to it: %s", e.node.name, e.reason))
		}
	case evReturned:
		s.appendNode(ctx, e.node)
	case evLate:
		s.joinLate(ctx, e.node)
	}
}

// joinLate puts a node that joined after the plan was made into the cast,
// served apart by the source: with a stream of its own, at its own pace,
// once the source has sent the others the whole stream (until then the
// source's link is theirs).
func (s *Server) joinLate(ctx context.Context, n *nodeState) {
	s.mu.Lock()
	if s.over || n.status != stReady {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	s.tree.addPaced(s.tree.root, n)
	n.status, n.start, n.lastHeard, n.lastMoved, n.waiting = stCasting, now, now, now, true
	s.castNodes = append(s.castNodes, n)
	s.mu.Unlock()
	s.say(EvRewired, n.name, "%s joined late: the source sends it the image once the others have the stream", n.name)
	a := control.Assign{Upstream: SourceName, Encoding: s.src.header.Encoding.String()}
	if err := n.conn.Send(control.Message{Type: control.MsgAssign, Assign: &a}); err != nil {
		s.post(castEvent{kind: evDown, node: n, reason: fmt.Sprintf("could not send it its place: %v", err)})
		return
	}
	s.rewire(ctx, rewiring{added: []link{{up: s.tree.root, node: n}}})
}

// removeNode takes a failed node out of the tree: its parent stops sending
// to it and its children get their stream from that parent, from the byte
// each had reached.
func (s *Server) removeNode(ctx context.Context, x *nodeState, reason string) {
	s.mu.Lock()
	now := time.Now()
	r, ok := s.tree.remove(x, s.serving(now))
	if !ok {
		s.mu.Unlock()
		return
	}
	if !x.finished() {
		// A node that reported its digest keeps it: its verdict comes all
		// the same. One that did not has failed.
		x.status, x.end = stFailed, now
		if x.reason == "" {
			x.reason = reason
		}
	}
	for _, l := range r.added {
		l.node.lastMoved = now // it waits for its new upstream from now on
	}
	s.mu.Unlock()

	s.log.Warn("node out of the cast", "node", x.name, "reason", reason, "children", len(r.added))
	var rewired string
	if len(r.added) > 0 {
		rewired = fmt.Sprintf("; %s now feeds %s", r.added[0].up.name(), joinNames(r.fed(), 8))
	}
	if x.verdict == verified {
		// Its target is verified; it only no longer serves.
		s.say(EvLeft, x.name, "%s is gone: %s%s", x.name, reason, rewired)
	} else {
		s.say(EvFailed, x.name, "%s is out of the cast: %s%s", x.name, reason, rewired)
		x.conn.Send(control.Message{Type: control.MsgAbort, Reason: "taken out of the cast: " + reason})
	}
	s.rewire(ctx, r)
	s.signal()
}

// handOver has the source serve child, which its upstream from could not
// serve: from's history no longer holds what the child needs. The source
// serves it from its own history or a stream of its own.
func (s *Server) handOver(ctx context.Context, from *nodeState, child, reason string) {
	s.mu.Lock()
	c := s.byName[child]
	r, ok := s.tree.toSource(c, from)
	s.mu.Unlock()
	if !ok {
		return
	}
	s.log.Warn("the source takes over a child", "child", c.name, "from", from.name, "reason", reason)
	s.rewire(ctx, r)
}

// appendNode puts a node that came back at the end of the line: under the
// deepest node still in the cast, which serves it from its history if it
// still holds what the node needs, or else hands it to the source.
func (s *Server) appendNode(ctx context.Context, n *nodeState) {
	s.mu.Lock()
	now := time.Now()
	r := s.tree.rejoin(n, s.serving(now))
	n.status, n.reason, n.end = stCasting, "", time.Time{}
	n.verdict, n.told, n.left = noVerdict, false, false
	n.lastHeard, n.lastMoved = now, now
	if !slices.Contains(s.castNodes, n) {
		s.castNodes = append(s.castNodes, n)
	}
	s.mu.Unlock()
	where := r.added[0].up.name()
	s.say(EvRewired, n.name, "%s is back: %s sends it the rest from byte %d", n.name, where, n.pos)
	a := control.Assign{Upstream: where, Encoding: s.src.header.Encoding.String()}
	n.conn.Send(control.Message{Type: control.MsgAssign, Assign: &a})
	s.rewire(ctx, r)
}

// serving tells whether a node of the tree still sends the stream on: one
// gone after its verdict does not.
func (s *Server) serving(now time.Time) func(*nodeState) bool {
	return func(n *nodeState) bool { return !n.gone(now, s.cfg.NodeTimeout) }
}

// rewire carries out a change of the tree: each cut link's upstream stops
// sending to its node, each added link's upstream starts sending to its
// node from where that node is.
func (s *Server) rewire(ctx context.Context, r rewiring) {
	s.mu.Lock()
	s.rewiredAt = time.Now()
	s.mu.Unlock()
	for _, l := range r.cut {
		if l.up.isSource() {
			s.src.detach(ctx, l.node.name)
			continue
		}
		l.up.node.conn.Send(control.Message{Type: control.MsgDetach, Peer: &control.Peer{Name: l.node.name}})
	}
	for _, l := range r.added {
		if l.up.isSource() {
			s.attachToSource(ctx, l.node)
			continue
		}
		peer := s.peer(l.node)
		if err := l.up.node.conn.Send(control.Message{Type: control.MsgAttach, Peer: &peer}); err != nil {
			s.post(castEvent{kind: evAttachFailed, node: l.up.node, child: l.node.name, reason: err.Error()})
		}
	}
}

// peer is what a node's upstream needs to send to n: its name, its data
// address and, in a cast without a key, its data token.
func (s *Server) peer(n *nodeState) control.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	paced := s.tree != nil && s.tree.paced(n)
	return control.Peer{Name: n.name, Addr: n.dataAddr, Token: n.token, Paced: paced}
}

// probeToken is what a peer that sends n a bandwidth probe needs: a token
// that lets it probe n, not feed it.
func (s *Server) probeToken(n *nodeState) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return n.probeToken
}

// attachToSource has the source serve n; failing that, n is out.
func (s *Server) attachToSource(ctx context.Context, n *nodeState) {
	go func() {
		if err := s.src.attach(ctx, n); err != nil && ctx.Err() == nil {
			s.post(castEvent{kind: evDown, node: n, reason: err.Error()})
		}
	}()
}
