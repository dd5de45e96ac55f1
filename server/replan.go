package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"dolly/capacity"
)

// A cast the model planned is held against its prediction while it runs.
// Every half second the server takes each node's rate over the last few
// seconds; when the slowest node runs below replanBelow of the prediction
// for longer than replanAfter, it asks the model again, with the links the
// cast itself found full. If those explain the shortfall and another
// plan is clearly faster under them, the running cast is rewired to it
// with the rewiring failures use: every node goes on from the byte it has.

const (
	replanBelow  = 0.8             // of the prediction, a cast that runs slower is checked
	replanAfter  = 5 * time.Second // for this long before it is checked
	rateWindow   = 3 * time.Second // a node's rate is taken over this window
	watchEvery   = 500 * time.Millisecond
	replanGain   = 1.15            // a new plan must be predicted this much faster
	replanSaving = 2 * time.Second // and save at least this long on what is left
	maxReplans   = 2               // checks per cast, so a cast never hunts
	// explainedBy is how far above the measured rate the running plan may
	// still be predicted under the measured links for them to explain it.
	explainedBy = 1.25
)

// watch follows a planned cast's rate. The cast loop owns it.
type watch struct {
	plan      capacity.Plan // the plan the cast runs now
	predicted float64       // its predicted rate, raw image bytes per second
	// expect is what the cast is held to, stretch by stretch of the
	// image (capacity.Result.RateOver), and running the prediction of
	// the plan that runs now, once a re-plan has changed it.
	expect, running capacity.Result
	size            int64 // the raw image's bytes
	start           time.Time
	below           time.Time // since when the cast runs below; zero if not
	samples         map[*nodeState][]sample
	left            int      // re-plans it may still make
	said            []Replan // what it did, for the summary
}

// Replan is one check of a running cast that ran below its prediction:
// what it measured and, if the plan changed, from what to what.
type Replan struct {
	At        time.Duration // since the cast started
	From, To  string        // plan names; equal if the plan stayed
	Measured  float64       // the cast's rate then (the slowest node), raw bytes/s
	Predicted float64       // the new prediction
	Message   string        // as said on the console
}

type sample struct {
	at           time.Time
	written, pos int64
}

// newWatch watches a cast the model chose the plan of; nil when there is
// nothing to hold the cast against or the operator fixed the plan.
func (s *Server) newWatch(ch Choice) *watch {
	if s.cfg.NoReplan || s.cfg.Shape != "" || s.resume != nil || !ch.Modeled {
		return nil
	}
	return &watch{plan: ch.Result.Plan, predicted: ch.Result.Rate, expect: ch.Result, size: s.img.Size, left: maxReplans, samples: map[*nodeState][]sample{}}
}

// rates are the nodes' rates over the window, for the nodes in the tree
// that have been casting long enough to tell.
type rates struct {
	written map[*nodeState]float64 // raw bytes written per second
	pos     map[*nodeState]float64 // stream bytes received per second
	slowest float64                // the least of written; 0 if none
	// worst is the least of the nodes' rates against what the prediction
	// expects over the stretch of the image each wrote in the window;
	// lagging is that node's rate and from, to its stretch (shares).
	worst, lagging float64
	from, to       float64
	lag            *nodeState // the lagging node
}

// observe records where every casting node of the tree is and returns
// their rates. Called with s.mu held.
func (w *watch) observe(t *castTree, now time.Time) rates {
	r := rates{written: map[*nodeState]float64{}, pos: map[*nodeState]float64{}}
	// Nodes served apart, and those behind them (a far switch's chain),
	// run at their own pace, not the plan's: only the plan's are held to it.
	var planned []*nodeState
	for _, v := range t.planned() {
		if v.node.status == stCasting {
			planned = append(planned, v.node)
		}
	}
	for n := range w.samples {
		if !slices.Contains(planned, n) {
			delete(w.samples, n)
		}
	}
	first := true
	for _, n := range planned {
		ss := append(w.samples[n], sample{at: now, written: n.progress.Written, pos: n.pos})
		for len(ss) > 1 && now.Sub(ss[1].at) >= rateWindow {
			ss = ss[1:]
		}
		w.samples[n] = ss
		span := now.Sub(ss[0].at).Seconds()
		if span < rateWindow.Seconds()*2/3 {
			continue
		}
		wr := float64(n.progress.Written-ss[0].written) / span
		r.written[n] = wr
		r.pos[n] = float64(n.pos-ss[0].pos) / span
		from, to := w.share(ss[0].written), w.share(n.progress.Written)
		ratio := 1.0
		if exp := heldTo(w.expect, from, to); !math.IsInf(exp, 1) {
			ratio = wr / exp
		}
		if first || wr < r.slowest {
			r.slowest = wr
		}
		if first || ratio < r.worst {
			r.worst, r.lagging, r.from, r.to, r.lag = ratio, wr, from, to, n
		}
		first = false
	}
	return r
}

// given is what the measured links gave the lagging node over the
// window, in image bytes a second: what it wrote or, if more, what it
// received, or its fair share of a full link it sits behind. While a
// node's buffers fill it receives more than it writes; and TCP shares a
// full link fairly only in the long run, so over a few seconds one of its
// streams may get a quarter less than the others, though the link alone
// holds them all. Called with s.mu held.
func (r rates) given(limits []fullLink) float64 {
	n := r.lag
	if n == nil {
		return r.lagging
	}
	ratio := imagePerStream(n.progress.Written, n.pos)
	got := max(r.lagging, r.pos[n]*ratio)
	for _, l := range limits {
		if slices.Contains(l.members, n) {
			got = max(got, l.rate/float64(len(l.members))*ratio)
		}
	}
	return got
}

// imagePerStream is how many image bytes a node has written for each
// byte of stream it received, so far: near 1 for a raw stream, more for a
// compressed one or one that skips zero runs. While a node's buffers fill
// it is a little less than the stream's true ratio, which errs on the side
// of a link that does not explain a slow cast.
func imagePerStream(written, pos int64) float64 {
	if written <= 0 || pos <= 0 {
		return 0
	}
	return float64(written) / float64(pos)
}

// heldTo is what expect holds a node to over a stretch of the image: its
// prediction there or, where the model thinks the stretch costs nothing
// (zero runs the source sends unread), the plan's average, so that a node
// crawling through free space is still judged.
func heldTo(expect capacity.Result, from, to float64) float64 {
	if exp := expect.RateOver(from, to); !math.IsInf(exp, 1) {
		return exp
	}
	return expect.Rate
}

// scaledTo is expect held to the share f of itself that a cast ran at;
// expect itself when f tells nothing (a stalled node's 0).
func scaledTo(expect capacity.Result, f float64) capacity.Result {
	if !(f > 0) || math.IsInf(f, 1) {
		return expect
	}
	return expect.Scaled(f)
}

// share is the share of the image before raw offset off.
func (w *watch) share(off int64) float64 {
	if w.size <= 0 {
		return 0
	}
	return float64(off) / float64(w.size)
}

// below reports whether r shows the cast below what it is held to.
func (r rates) below() bool {
	return len(r.written) > 0 && r.worst < replanBelow && !math.IsNaN(r.worst)
}

// check is the watch's turn: it takes the nodes' rates and, once the cast
// has run below its prediction long enough, re-plans.
func (s *Server) check(ctx context.Context, w *watch, now time.Time) {
	if w.start.IsZero() {
		w.start = now
	}
	s.mu.Lock()
	r := w.observe(s.tree, now)
	s.mu.Unlock()
	if !r.below() || w.left <= 0 {
		w.below = time.Time{}
		return
	}
	if w.below.IsZero() {
		w.below = now
		return
	}
	if now.Sub(w.below) <= replanAfter {
		return
	}
	w.below = time.Time{}
	w.left--
	rp, expect, rw, err := s.replan(w, r, now)
	if err != nil {
		if errors.Is(err, errPlanEnding) {
			s.log.Info("not re-planning the cast", "why", err)
		} else {
			s.log.Warn("re-planning the cast", "err", err)
		}
		// Watch for a further fall, not this one.
		w.predicted, w.expect = r.slowest, scaledTo(w.expect, r.worst)
		return
	}
	fmt.Fprintln(s.cfg.Out, rp.Message)
	s.emit(Event{Type: EvReplanned, Text: strings.TrimSpace(rp.Message)})
	s.log.Info("re-plan", "from", rp.From, "to", rp.To, "measured", rp.Measured, "predicted", rp.Predicted)
	w.said = append(w.said, rp)
	w.predicted, w.expect = rp.Predicted, expect
	if rw != nil {
		w.running = expect
		clear(w.samples) // the rates of the old plan say nothing of the new
		s.mu.Lock()
		for _, l := range rw.added {
			l.node.lastMoved = now // it waits for its new upstream from now on
		}
		s.mu.Unlock()
		s.rewire(ctx, *rw)
		s.signal()
	}
}

// errPlanEnding says a node of the plan has finished: the plan stays to
// the end, as a cast that is ending is no time to rewire.
var errPlanEnding = errors.New("the plan stays to the end")

// replan asks the model again for the nodes in the tree, with the links
// the cast found full, and reshapes the tree if another plan is clearly
// faster. It returns what the cast is held to from now on; the rewiring is
// nil when the plan stays.
func (s *Server) replan(w *watch, r rates, now time.Time) (Replan, capacity.Result, *rewiring, error) {
	rp := Replan{At: now.Sub(w.start), From: w.plan.Name(), To: w.plan.Name(), Measured: r.slowest}
	s.mu.Lock()
	tree, nodes := s.tree.shape()
	var remaining int64
	for _, n := range nodes {
		if n.status != stCasting {
			s.mu.Unlock()
			return rp, capacity.Result{}, nil, fmt.Errorf("%s has finished: %w", n.name, errPlanEnding)
		}
		remaining = max(remaining, s.img.Size-n.progress.Written)
	}
	limits := fullLinks(s.tree, r, s.diskRates())
	gave := r.given(limits)
	s.mu.Unlock()

	net, opt, _ := s.model(nodes, s.netFigs)
	sourceHost := w.plan.Hosts[0]
	hosts := []string{sourceHost}
	for _, n := range nodes {
		hosts = append(hosts, n.name)
	}
	share := net.LinkEfficiency
	if share <= 0 || share > 1 {
		share = 1
	}
	var found []string
	for _, l := range limits {
		name := l.name
		if name == SourceName {
			name = sourceHost
		}
		for i := range net.Hosts {
			if h := &net.Hosts[i]; h.Name == name && (h.Link <= 0 || l.rate/share < h.Link) {
				h.Link = l.rate / share
			}
		}
		found = append(found, l.String())
	}
	what := "no link of the plan ran full"
	if len(found) > 0 {
		what = "measured " + strings.Join(found, ", ")
	}
	cur, err := capacity.Evaluate(net, capacity.Plan{Tree: tree, Hosts: hosts, Compression: w.plan.Compression}, opt)
	if err != nil {
		return rp, capacity.Result{}, nil, err
	}
	at := formatDuration(rp.At)
	// The measured links explain the shortfall if the plan, under them,
	// expects about what they gave the lagging node where it was in the
	// image.
	if cur.RateOver(r.from, r.to) > explainedBy*gave {
		rp.Predicted = r.slowest
		rp.Message = fmt.Sprintf("at %s the cast runs at %s MB/s, below the predicted %s; %s, which does not explain it: the plan stays",
			at, mbps(r.slowest), mbps(w.predicted), what)
		return rp, scaledTo(w.expect, r.worst), nil, nil
	}
	ranked, err := capacity.Rank(net, opt)
	if err != nil {
		return rp, capacity.Result{}, nil, err
	}
	best := cur
	for _, c := range ranked {
		if c.Plan.Compression.Enabled() == w.plan.Compression.Enabled() {
			best = c
			break
		}
	}
	left := float64(remaining)
	saving := time.Duration((left/cur.Rate - left/best.Rate) * float64(time.Second))
	if best.Rate < replanGain*cur.Rate || saving < replanSaving {
		rp.Predicted = cur.Rate
		rp.Message = fmt.Sprintf("at %s the cast runs at %s MB/s, below the predicted %s (%s): %s stays, no plan is clearly faster",
			at, mbps(r.slowest), mbps(w.predicted), what, w.plan.Name())
		return rp, cur, nil, nil
	}
	order := make([]*nodeState, 0, len(nodes))
	s.mu.Lock()
	for _, name := range best.Plan.Hosts[1:] {
		order = append(order, s.byName[name])
	}
	rw, err := s.tree.reshape(best.Plan.Tree, order)
	s.mu.Unlock()
	if err != nil {
		return rp, capacity.Result{}, nil, err
	}
	rp.To, rp.Predicted = best.Plan.Name(), best.Rate
	rp.Message = fmt.Sprintf("re-planned at %s: %s -> %s (%s; the cast ran at %s MB/s, %s predicted now)",
		at, rp.From, rp.To, what, mbps(r.slowest), mbps(best.Rate))
	w.plan = best.Plan
	return rp, best, &rw, nil
}

// diskRates are the nodes' measured target write rates, each node's own
// or its machine's. Called with s.mu held.
func (s *Server) diskRates() map[*nodeState]float64 {
	machine := map[string]float64{}
	for _, n := range s.castNodes {
		if n.probe != nil && n.probe.DiskWriteBytesPerSec > 0 {
			machine[n.machine] = n.probe.DiskWriteBytesPerSec
		}
	}
	out := map[*nodeState]float64{}
	for _, n := range s.castNodes {
		out[n] = machine[n.machine]
	}
	return out
}

// fullLink is a host's link the cast found full: it sent rate bytes/s of
// stream in all, and its children wanted more.
type fullLink struct {
	name    string
	rate    float64
	members []*nodeState // its children
}

func (l fullLink) String() string {
	return fmt.Sprintf("%s sending %s MB/s to %s", l.name, mbps(l.rate), plural(len(l.members), "node"))
}

// fullLinks finds the senders whose links held their children back: each
// sends to several nodes, and each of those gets well below what the
// sender itself gets (the source gets it all). The children's pull sums to
// what the link carried. A sender with one child cannot tell a full link
// from a slow child. Called with s.mu held.
//
// Children that write about as fast as their disks were measured to prove
// nothing about the link either: their disks hold them (disk gives each
// node's measured write rate, 0 if unknown).
func fullLinks(t *castTree, r rates, disk map[*nodeState]float64) []fullLink {
	var out []fullLink
	for _, u := range append([]*vertex{t.root}, t.members()...) {
		if len(u.children) < 2 {
			continue
		}
		own := math.Inf(1)
		if !u.isSource() {
			var ok bool
			if own, ok = r.pos[u.node]; !ok {
				continue
			}
		}
		var sum float64
		measured, diskBound := 0, 0
		for _, c := range u.children {
			if p, ok := r.pos[c.node]; ok {
				sum += p
				measured++
			}
			if d := disk[c.node]; d > 0 && r.written[c.node] >= replanBelow*d {
				diskBound++
			}
		}
		if measured < len(u.children) || sum/float64(measured) >= replanBelow*own || diskBound > 0 {
			continue
		}
		l := fullLink{name: u.name(), rate: sum}
		for _, c := range u.children {
			l.members = append(l.members, c.node)
		}
		out = append(out, l)
	}
	return out
}
