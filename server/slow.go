package server

import (
	"context"
	"math"
	"slices"
	"time"

	"dolly/capacity"
	"dolly/dolly/relay"
)

// A node the plan could not know was slow (a disk that slows down as it
// fills, a link shared with other traffic) holds back every node above it:
// each relay waits for its child to take the stream. Each node reports the
// child its relay waited for most of the time (control.Progress.HeldBy).
// While the cast runs below replanBelow of its prediction, a relay held
// back for heldFor by a child that is not itself held back by its own has
// found the culprit, which is then served apart: its children go to its
// upstream, and a leaf of the tree serves it at its own pace.

// heldFor is how long a relay must be held back by one child before the
// child is moved apart.
const heldFor = 3 * time.Second

// holdWatch follows what holds one relay back, from readings of its
// Relay.Held: the child it waited for most of the time since since.
type holdWatch struct {
	prev  map[string]time.Duration
	at    time.Time
	by    string
	since time.Time
}

// holdWindow is the span over which a relay's waits are weighed.
const holdWindow = time.Second

// observe takes a reading of r at now.
func (h *holdWatch) observe(r *relay.Relay, now time.Time) {
	if !h.at.IsZero() && now.Sub(h.at) < holdWindow {
		return
	}
	cur := r.Held()
	by := ""
	if !h.at.IsZero() {
		by = relay.MostHeld(h.prev, cur, now.Sub(h.at)/2)
	}
	if by != h.by {
		h.by, h.since = by, now
	}
	h.prev, h.at = cur, now
}

// moveSlowApart serves apart a node that has held its upstream back for
// heldFor while nothing held it back, at most half the cast's nodes. A
// watched cast (w, if not nil) is the watch's to re-plan first: a plan the
// model got wrong is held back by its links, not by one node.
func (s *Server) moveSlowApart(ctx context.Context, w *watch, now time.Time) {
	s.mu.Lock()
	if s.src != nil {
		s.srcHold.observe(s.src.feed.relay, now)
	}
	expect := s.expect
	if w != nil {
		if len(w.said) == 0 {
			expect = capacity.Result{} // the watch has not checked the cast yet
		}
		if w.running.Rate > 0 {
			expect = w.running // the plan that runs now
		}
	}
	if !(expect.Rate > 0) || len(s.movedApart) >= len(s.castNodes)/2 {
		s.mu.Unlock()
		return
	}
	slow, holder, held := s.culprit(expect, now)
	if slow == nil {
		s.mu.Unlock()
		return
	}
	r, leaf, ok := s.tree.moveApart(slow, s.serving(now))
	if !ok {
		s.mu.Unlock()
		return
	}
	if s.movedApart == nil {
		s.movedApart = map[string]string{}
	}
	s.movedApart[slow.name] = leaf.name()
	for _, l := range r.added {
		l.node.lastMoved = now // it waits for its new upstream from now on
	}
	s.mu.Unlock()
	s.say(EvRewired, slow.name, "%s holds the others back (%s waited on it for %s): %s serves it apart from now on, at its own pace",
		slow.name, holder, formatDuration(held), leaf.name())
	s.log.Warn("slow node moved apart", "node", slow.name, "held", holder, "by", leaf.name())
	s.rewire(ctx, r)
	s.signal()
}

// culprit is the node that has held its upstream back for heldFor while
// nothing held it back, and running below what expect holds it to: the
// upstream's name and how long it was held; nil if none. Called with s.mu
// held.
func (s *Server) culprit(expect capacity.Result, now time.Time) (slow *nodeState, holder string, held time.Duration) {
	for _, u := range append([]*vertex{s.tree.root}, s.tree.members()...) {
		by, since := s.srcHold.by, s.srcHold.since
		if !u.isSource() {
			if u.paced || u.node.status != stCasting {
				continue
			}
			by, since = u.node.heldBy, u.node.heldSince
		}
		// Waits from before the last rewiring tell of another tree, and
		// a rewiring's new links may still be on their way: a node moved
		// apart meanwhile would be spliced into both trees at once.
		since = later(since, s.rewiredAt)
		if by == "" || now.Sub(since) < heldFor {
			continue
		}
		c := s.byName[by]
		v := s.tree.at[c]
		if c == nil || v == nil || v.parent != u || v.paced || c.status != stCasting {
			continue
		}
		if c.heldBy != "" && !slowBothWays(c, s.byName[c.heldBy]) {
			continue // c waits on its own child: the culprit is further down
		}
		// A plan that runs as predicted has a bottleneck too, which holds
		// the nodes above it back as much: only a cast held below its
		// prediction has a culprit.
		exp := s.expectedOf(expect, c)
		if c.rate <= 0 || math.IsInf(exp, 1) || c.rate >= replanBelow*exp || !slowerThanSiblings(u, v) {
			continue
		}
		return c, u.name(), now.Sub(since)
	}
	return nil, "", 0
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// expectedOf is the rate the plan expects of node n over the stretch of
// the image it wrote lately, about the span its rate is taken over: a
// stretch of files runs slower than the image's average, and only a node
// below what its own stretch allows holds the others back. Called with
// s.mu held.
func (s *Server) expectedOf(expect capacity.Result, n *nodeState) float64 {
	size := float64(s.img.Size)
	if size <= 0 {
		return expect.Rate
	}
	to := float64(n.progress.Written)
	from := to - n.rate*rateWindow.Seconds()
	return heldTo(expect, from/size, to/size)
}

// slowBothWays reports whether c, which its child d holds back, is the
// culprit all the same: its link is slow both ways. d then waits for c's
// data most of the time, held back by nothing, and c waits for its own
// upstream's a good part of its time. A child slow on its own (its disk,
// its inbound link) holds c back while c reads its upstream at will. (A
// slow outbound link of c's alone looks like d's inbound link slow: d is
// moved then.)
func slowBothWays(c, d *nodeState) bool {
	return d != nil && d.heldBy == "" && d.starved >= 0.5 && c.starved >= 0.25
}

// slowerThanSiblings reports whether v runs well below the other children
// of u that the plan serves, if it has any: children that share a link
// full to the brim run alike, and none of them is the culprit.
func slowerThanSiblings(u, v *vertex) bool {
	var rates []float64
	for _, k := range u.children {
		if k != v && !k.paced && k.node.status == stCasting {
			rates = append(rates, k.node.rate)
		}
	}
	if len(rates) == 0 {
		return true
	}
	slices.Sort(rates)
	return v.node.rate < replanBelow*rates[len(rates)/2]
}
