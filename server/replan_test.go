package server

import (
	"math"
	"strings"
	"testing"
	"time"

	"dolly/capacity"
)

func TestReshapeRewiresOnlyTheNodesWhoseUpstreamChanges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		from   []int // the tree's parents
		to     capacity.Tree
		order  []string // the new plan's vertices 1…n
		want   string
		rewire string
	}{
		{"star to chain", capacity.Star(3).Parent, capacity.Chain(3), []string{"n1", "n2", "n3"},
			"source(n1(n2(n3)))", "-source→n2 -source→n3 +n1→n2 +n2→n3"},
		{"chain to star", capacity.Chain(3).Parent, capacity.Star(3), []string{"n1", "n2", "n3"},
			"source(n1 n2 n3)", "-n1→n2 -n2→n3 +source→n2 +source→n3"},
		{"the same tree", capacity.Chain(3).Parent, capacity.Chain(3), []string{"n1", "n2", "n3"},
			"source(n1(n2(n3)))", ""},
		{"a chain in another order", capacity.Chain(3).Parent, capacity.Chain(3), []string{"n3", "n1", "n2"},
			"source(n3(n1(n2)))", "-n2→n3 -source→n1 +source→n3 +n3→n1"}, // n2 keeps n1
		{"star to 2-tree", capacity.Star(4).Parent, capacity.NaryTree(4, 2), []string{"n1", "n2", "n3", "n4"},
			"source(n1(n3 n4) n2)", "-source→n3 -source→n4 +n1→n3 +n1→n4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, byName := testTree(t, tc.from...)
			var order []*nodeState
			for _, name := range tc.order {
				order = append(order, byName[name])
			}
			r, err := tree.reshape(tc.to, order)
			if err != nil {
				t.Fatal(err)
			}
			if got := tree.String(); got != tc.want {
				t.Errorf("tree %s, want %s", got, tc.want)
			}
			if got := r.String(); got != tc.rewire {
				t.Errorf("rewiring %q, want %q", r.String(), tc.rewire)
			}
		})
	}
}

func TestReshapeRefusesAPlanOfOtherNodes(t *testing.T) {
	tree, byName := testTree(t, capacity.Star(3).Parent...)
	before := tree.String()
	if _, err := tree.reshape(capacity.Chain(2), []*nodeState{byName["n1"], byName["n2"]}); err == nil {
		t.Error("a plan of 2 of the tree's 3 nodes was taken")
	}
	stranger := &nodeState{name: "x"}
	if _, err := tree.reshape(capacity.Chain(3), []*nodeState{byName["n1"], byName["n2"], stranger}); err == nil || !strings.Contains(err.Error(), "x is not in the plan's tree") {
		t.Errorf("a plan with a node not in the tree: %v", err)
	}
	if got := tree.String(); got != before {
		t.Errorf("a refused plan changed the tree: %s, was %s", got, before)
	}
}

func TestShapeIsTheTreeAsTheModelTakesIt(t *testing.T) {
	tree, _ := testTree(t, capacity.NaryTree(5, 2).Parent...)
	shape, nodes := tree.shape()
	var names []string
	for _, n := range nodes {
		names = append(names, n.name)
	}
	if got := strings.Join(names, " "); got != "n1 n2 n3 n4 n5" {
		t.Errorf("order %s", got)
	}
	want := []int{-1, 0, 0, 1, 1, 2}
	for v, p := range shape.Parent {
		if p != want[v] {
			t.Fatalf("parents %v, want %v", shape.Parent, want)
		}
	}
}

// TestFullLinksFindsASenderThatHoldsItsChildrenBack gives the watch rates
// over a tree and checks which links it calls full.
func TestFullLinksFindsASenderThatHoldsItsChildrenBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent []int
		pos    map[string]float64 // stream bytes/s
		want   string
	}{
		{"a star: the source's link carries it all", capacity.Star(4).Parent,
			map[string]float64{"n1": 3e6, "n2": 3e6, "n3": 3e6, "n4": 3e6}, "dolly-server sending 12.0 MB/s to 4 nodes"},
		{"a chain tells nothing", capacity.Chain(3).Parent,
			map[string]float64{"n1": 3e6, "n2": 3e6, "n3": 3e6}, ""},
		{"a relay whose children get what it gets", capacity.NaryTree(4, 2).Parent,
			map[string]float64{"n1": 10e6, "n2": 10e6, "n3": 10e6, "n4": 10e6}, "dolly-server sending 20.0 MB/s to 2 nodes"},
		{"a relay that holds its children back", capacity.NaryTree(4, 2).Parent,
			map[string]float64{"n1": 10e6, "n2": 10e6, "n3": 5e6, "n4": 5e6}, "dolly-server sending 20.0 MB/s to 2 nodes, n1 sending 10.0 MB/s to 2 nodes"},
		{"a child not yet measured", capacity.Star(2).Parent,
			map[string]float64{"n1": 3e6}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, byName := testTree(t, tc.parent...)
			r := rates{pos: map[*nodeState]float64{}}
			for name, p := range tc.pos {
				r.pos[byName[name]] = p
			}
			var got []string
			for _, l := range fullLinks(tree, r, nil) {
				got = append(got, l.String())
			}
			if s := strings.Join(got, ", "); s != tc.want {
				t.Errorf("full links %q, want %q", s, tc.want)
			}
		})
	}
}

// TestWatchTakesRatesOverAWindow feeds the watch a node's progress and
// checks the rate it takes from it.
func TestWatchTakesRatesOverAWindow(t *testing.T) {
	tree, byName := testTree(t, capacity.Chain(2).Parent...)
	for _, n := range byName {
		n.status = stCasting
	}
	w := &watch{samples: map[*nodeState][]sample{}}
	t0 := time.Unix(1000, 0)
	for i := range 9 {
		now := t0.Add(time.Duration(i) * watchEvery)
		byName["n1"].progress.Written = int64(i) * 5e6 // 10 MB/s
		byName["n2"].progress.Written = int64(i) * 2e6 // 4 MB/s
		byName["n1"].pos, byName["n2"].pos = byName["n1"].progress.Written, byName["n2"].progress.Written
		r := w.observe(tree, now)
		span := time.Duration(i) * watchEvery
		if span < rateWindow*2/3 {
			if len(r.written) != 0 {
				t.Fatalf("after %s: rates %v before the window has a span", span, r.written)
			}
			continue
		}
		if got := r.written[byName["n1"]]; got < 9.99e6 || got > 10.01e6 {
			t.Errorf("after %s: n1 at %.0f B/s, want 10 MB/s", span, got)
		}
		if r.slowest < 3.99e6 || r.slowest > 4.01e6 {
			t.Errorf("after %s: the slowest at %.0f B/s, want n2's 4 MB/s", span, r.slowest)
		}
		if n := len(w.samples[byName["n1"]]); n > int(rateWindow/watchEvery)+1 {
			t.Errorf("after %s: %d samples kept", span, n)
		}
	}
}

// TestWatchLeavesNodesServedApartOut: a far switch's nodes, served apart
// as a chain of their own, run at the trunk's pace; neither its head nor
// the nodes behind it may hold the plan to their rate.
func TestWatchLeavesNodesServedApartOut(t *testing.T) {
	tree, by := testTree(t, capacity.Chain(2).Parent...)
	far1, far2 := &nodeState{name: "far1"}, &nodeState{name: "far2"}
	tree.addPaced(tree.at[by["n2"]], far1)
	tree.add(tree.at[far1], far2)
	all := []*nodeState{by["n1"], by["n2"], far1, far2}
	speed := map[*nodeState]int64{by["n1"]: 10e6, by["n2"]: 8e6, far1: 1e6, far2: 1e6}
	for _, n := range all {
		n.status = stCasting
	}
	w := &watch{samples: map[*nodeState][]sample{}}
	t0 := time.Unix(1000, 0)
	var r rates
	for i := range 8 {
		for _, n := range all {
			n.progress.Written = int64(i) * speed[n] / 2
			n.pos = n.progress.Written
		}
		r = w.observe(tree, t0.Add(time.Duration(i)*watchEvery))
	}
	if len(r.written) != 2 || r.written[far1] != 0 || r.written[far2] != 0 {
		t.Errorf("rates taken of %d nodes (%v), want n1 and n2 only", len(r.written), r.written)
	}
	if r.slowest < 7.99e6 || r.slowest > 8.01e6 {
		t.Errorf("the slowest at %.0f B/s, want n2's 8 MB/s", r.slowest)
	}
	if _, ok := w.samples[far2]; ok {
		t.Error("samples kept of a node behind the one served apart")
	}
}

// TestFullLinksLeavesDiskBoundChildrenOut: a star whose children write as
// fast as their disks were measured proves nothing about the source's
// link; the same star with fast disks does.
func TestFullLinksLeavesDiskBoundChildrenOut(t *testing.T) {
	tree, byName := testTree(t, capacity.Star(3).Parent...)
	r := rates{pos: map[*nodeState]float64{}, written: map[*nodeState]float64{}}
	for _, n := range byName {
		r.pos[n], r.written[n] = 3e6, 3e6
	}
	for _, tc := range []struct {
		disk float64
		full bool
	}{{3.2e6, false}, {300e6, true}} {
		disk := map[*nodeState]float64{}
		for _, n := range byName {
			disk[n] = tc.disk
		}
		if got := len(fullLinks(tree, r, disk)) > 0; got != tc.full {
			t.Errorf("children writing 3 MB/s to disks of %.0f MB/s: source link full %v, want %v", tc.disk/1e6, got, tc.full)
		}
	}
}

// A re-plan reshapes the plan's nodes only: a node served apart stays with
// the node that serves it, at its pace, and is not rewired.
func TestReshapeKeepsNodesServedApart(t *testing.T) {
	tree, by := testTree(t, -1, 0, 1, 2)
	tree.addPaced(tree.at[by["n3"]], &nodeState{name: "n4"})
	planned, nodes := tree.shape()
	if planned.Nodes() != 3 {
		t.Fatalf("the plan's shape has %d nodes, want 3 (n4 is apart)", planned.Nodes())
	}
	r, err := tree.reshape(capacity.Star(3), nodes)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tree.String(), "source(n1 n2 n3(n4))"; got != want {
		t.Errorf("tree %s, want %s", got, want)
	}
	if got, want := r.String(), "-n1→n2 -n2→n3 +source→n2 +source→n3"; got != want {
		t.Errorf("rewiring %q, want %q", got, want)
	}
	if !tree.paced(tree.at[by["n3"]].children[0].node) {
		t.Error("n4 is no longer served at its pace")
	}
}

// TestWatchHoldsEachNodeToItsStretch: a filesystem image's files run at a
// link's rate and its free space far faster, so a node in the files is
// held to the files' rate, not to the image's average.
func TestWatchHoldsEachNodeToItsStretch(t *testing.T) {
	const size = 1e9
	files := capacity.Result{Rate: 18e6, Stretches: []capacity.Stretch{{Share: 0.5, Rate: 10e6}, {Share: 0.5, Rate: 90e6}}}
	tests := []struct {
		name   string
		expect capacity.Result
		start  int64   // where the node is in the image
		rate   float64 // what it writes
		below  bool
	}{
		{"in the files at their rate", files, 0, 10e6, false},
		{"in the files at half their rate", files, 0, 5e6, true},
		{"in the free space at the files' rate", files, 0.6 * size, 10e6, true},
		{"in the free space at its rate", files, 0.6 * size, 90e6, false},
		{"a uniform image: held to the average", capacity.Result{Rate: 18e6}, 0, 10e6, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, byName := testTree(t, capacity.Chain(1).Parent...)
			n := byName["n1"]
			n.status = stCasting
			w := &watch{expect: tt.expect, size: size, samples: map[*nodeState][]sample{}}
			t0 := time.Unix(1000, 0)
			var r rates
			for i := range 7 {
				n.progress.Written = tt.start + int64(float64(i)*tt.rate*watchEvery.Seconds())
				r = w.observe(tree, t0.Add(time.Duration(i)*watchEvery))
			}
			if r.below() != tt.below {
				t.Errorf("below = %v (%.2f of what is expected), want %v", r.below(), r.worst, tt.below)
			}
			if r.lagging < 0.99*tt.rate || r.lagging > 1.01*tt.rate {
				t.Errorf("the lagging node at %.0f B/s, want %.0f", r.lagging, tt.rate)
			}
		})
	}
}

// TestWatchJudgesANodeInAStretchThatCostsNothing: zero runs sent unread
// cost the plan nothing, yet a node crawling through them (a failing disk
// zeroing them) is held to the plan's average, not let be.
func TestWatchJudgesANodeInAStretchThatCostsNothing(t *testing.T) {
	const size = 1e9
	holes := capacity.Result{Rate: 25e6, Stretches: []capacity.Stretch{{Share: 0.5, Rate: 12.5e6}, {Share: 0.5, Rate: math.Inf(1)}}}
	tree, byName := testTree(t, capacity.Chain(1).Parent...)
	n := byName["n1"]
	n.status = stCasting
	w := &watch{expect: holes, size: size, samples: map[*nodeState][]sample{}}
	t0 := time.Unix(1000, 0)
	var r rates
	for i := range 7 {
		n.progress.Written = 0.6*size + int64(float64(i)*5e6*watchEvery.Seconds())
		r = w.observe(tree, t0.Add(time.Duration(i)*watchEvery))
	}
	if !r.below() {
		t.Errorf("a node at 5 MB/s through free space is not below (%.2f of what it is held to)", r.worst)
	}
	if s := scaledTo(holes, 0); s.Rate != holes.Rate {
		t.Errorf("held to %v after a stalled node, want the prediction kept", s.Rate)
	}
}

// TestGivenCountsWhatTheLinksGaveTheLaggingNode: whether the measured
// links explain a slow cast is judged on what they gave the lagging node,
// not only on what it wrote: a node filling its buffers receives more, and
// one of a full link's streams may get less than its fair share for a few
// seconds, though the link alone holds them all.
func TestGivenCountsWhatTheLinksGaveTheLaggingNode(t *testing.T) {
	for _, tc := range []struct {
		name           string
		parent         []int
		written, pos   map[string]float64 // per second over the window
		soFar, soFarAt int64              // the lagging n1's written and pos so far
		want           float64
	}{
		{"a chain node that wrote what it received", capacity.Chain(2).Parent,
			map[string]float64{"n1": 2.4e6, "n2": 2.4e6}, map[string]float64{"n1": 2.4e6, "n2": 2.4e6},
			24e6, 24e6, 2.4e6},
		{"a chain node filling its buffers", capacity.Chain(2).Parent,
			map[string]float64{"n1": 2.4e6, "n2": 3e6}, map[string]float64{"n1": 3e6, "n2": 3e6},
			24e6, 24e6, 3e6},
		{"a compressed stream: received bytes count as the image bytes they carry", capacity.Chain(2).Parent,
			map[string]float64{"n1": 2e6, "n2": 3e6}, map[string]float64{"n1": 1.5e6, "n2": 1.5e6},
			20e6, 10e6, 3e6},
		{"the stream of a full link that got less than its share", capacity.Star(4).Parent,
			map[string]float64{"n1": 2.4e6, "n2": 3.4e6, "n3": 3.4e6, "n4": 3.6e6},
			map[string]float64{"n1": 2.4e6, "n2": 3.4e6, "n3": 3.4e6, "n4": 3.6e6},
			24e6, 24e6, 3.2e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, byName := testTree(t, tc.parent...)
			r := rates{written: map[*nodeState]float64{}, pos: map[*nodeState]float64{}, lag: byName["n1"]}
			for name, v := range tc.written {
				r.written[byName[name]] = v
			}
			for name, v := range tc.pos {
				r.pos[byName[name]] = v
			}
			r.lagging = r.written[r.lag]
			r.lag.progress.Written, r.lag.pos = tc.soFar, tc.soFarAt
			if got := r.given(fullLinks(tree, r, nil)); math.Abs(got-tc.want) > 1 {
				t.Errorf("given %.0f B/s, want %.0f", got, tc.want)
			}
		})
	}
}
