package server

import (
	"math"
	"slices"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/relay"
	"dolly/imaging"
)

// A node far slower than the rest is served apart, by a leaf of the plan;
// nodes alike, or one only a little slower, stay in the plan.
func TestServeApart(t *testing.T) {
	const fast = 12.5e6 // 100 Mbit/s
	tests := []struct {
		name      string
		nodes     int
		slow      map[int]float64 // host index (pcb is 1) → link
		shape     capacity.Kind
		wantApart []string
		wantFrom  string
	}{
		{"all alike", 6, nil, "", nil, ""},
		{"one at 10 Mbit/s", 6, map[int]float64{3: fast / 10}, "", []string{"pcd"}, "pcg"},
		{"one at 10 Mbit/s, forced chain", 6, map[int]float64{3: fast / 10}, capacity.KindChain, []string{"pcd"}, "pcg"},
		{"two at 10 Mbit/s", 8, map[int]float64{2: fast / 10, 5: fast / 10}, "", []string{"pcc", "pcf"}, ""},
		{"one a little slower", 6, map[int]float64{3: fast * 0.8}, "", nil, ""},
		{"two nodes, one slow", 2, map[int]float64{1: fast / 10}, "", []string{"pcb"}, "pcc"},
	}
	raw := capacity.Compression{Factor: 1}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			net := crowdedLab(tt.nodes, fast)
			for i := range net.Hosts {
				net.Hosts[i].Machine = net.Hosts[i].Name // one machine each
				if l, ok := tt.slow[i+1]; ok {
					net.Hosts[i+1].Link = l
				}
			}
			opt := capacity.Options{ImageBytes: 1 << 30, Stored: &raw}
			choose := func(n capacity.Network, compress Compress) (Choice, error) {
				return Choose(n, opt, tt.shape, 0, compress, imaging.Raw)
			}
			ch, err := choose(net, CompressNo)
			if err != nil {
				t.Fatal(err)
			}
			with := ch.Result.Rate
			ch = serveApart(net, opt, ch, choose)
			var got []string
			for _, a := range ch.Apart {
				got = append(got, a.Name)
				if tt.wantFrom != "" && a.From != tt.wantFrom {
					t.Errorf("%s served by %s, want %s (the chain's tail)", a.Name, a.From, tt.wantFrom)
				}
				if want := tt.slow[int(a.Name[2]-'a')] * capacity.TCPEthernetEfficiency; a.Rate > want*1.001 || a.Rate < want*0.9 {
					t.Errorf("%s predicted at %.3g B/s, its link carries %.3g", a.Name, a.Rate, want)
				}
				for _, h := range ch.Result.Plan.Hosts {
					if h == a.Name {
						t.Errorf("%s is served apart and in the plan %v", a.Name, ch.Result.Plan.Hosts)
					}
				}
			}
			if len(got) != len(tt.wantApart) || (len(got) > 0 && !equalSets(got, tt.wantApart)) {
				t.Fatalf("served apart %v, want %v; notes %q", got, tt.wantApart, ch.Notes)
			}
			if len(got) > 0 && ch.Result.Rate < apartGain*with {
				t.Errorf("the plan runs at %.3g without them, %.3g with them", ch.Result.Rate, with)
			}
		})
	}
}

func equalSets(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// A relay held back by its child is the culprit itself only when the
// child starves and so does the relay: its link is slow both ways.
func TestSlowBothWays(t *testing.T) {
	tests := []struct {
		name       string
		c, d       nodeState
		culpritIsC bool
	}{
		{"c's link slow both ways", nodeState{starved: 0.5}, nodeState{starved: 0.9}, true},
		{"d's disk slow", nodeState{starved: 0.05}, nodeState{starved: 0.1}, false},
		{"d's inbound link slow", nodeState{starved: 0.1}, nodeState{starved: 0.9}, false},
		{"d held by its own child", nodeState{starved: 0.5}, nodeState{starved: 0.9, heldBy: "pc05"}, false},
	}
	for _, tt := range tests {
		if got := slowBothWays(&tt.c, &tt.d); got != tt.culpritIsC {
			t.Errorf("%s: c is the culprit: %v, want %v", tt.name, got, tt.culpritIsC)
		}
	}
	if slowBothWays(&nodeState{starved: 1}, nil) {
		t.Error("a child that is gone makes c the culprit")
	}
}

// TestCulpritWaitsOutARewiring: a node that held the source back in the
// tree before a rewiring is no culprit until it has held the new tree
// back as long: a move meanwhile would splice it into both trees (a
// re-plan's new links still on their way).
func TestCulpritWaitsOutARewiring(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		rewired  time.Duration // before now; 0: never
		wantSlow string
	}{
		{"never rewired", 0, "n1"},
		{"rewired before the hold began", 10 * time.Second, "n1"},
		{"rewired a second ago", time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, byName := testTree(t, capacity.Star(2).Parent...)
			for _, n := range byName {
				n.status, n.rate = stCasting, 10e6
			}
			byName["n1"].rate = 1e6
			s := &Server{tree: tree, byName: byName, img: &imaging.Image{Size: 1e9},
				srcHold: holdWatch{by: "n1", since: now.Add(-5 * time.Second)}}
			if tc.rewired > 0 {
				s.rewiredAt = now.Add(-tc.rewired)
			}
			slow, _, _ := s.culprit(capacity.Result{Rate: 10e6}, now)
			got := ""
			if slow != nil {
				got = slow.name
			}
			if got != tc.wantSlow {
				t.Errorf("culprit %q, want %q", got, tc.wantSlow)
			}
		})
	}
}

// A part of the cast's network is told how many of the cast's hosts run on
// each of its machines beside it: the nodes served apart take their turns
// on the cores the plan's hosts run on.
func TestAlongsideCountsTheHostsBesideThePlan(t *testing.T) {
	all := crowdedLab(8, 125e6) // the source and pcb..pci on box
	for i := 5; i < len(all.Hosts); i++ {
		all.Hosts[i].Machine = "other" // pcf..pci
	}
	all.Machines = map[string]capacity.Machine{"box": {Contention: 0.1}} // none for other: it still counts
	tests := []struct {
		name       string
		keep       []string // the part's nodes, beside the source
		box, other int
	}{
		{"the whole cast", []string{"pcb", "pcc", "pcd", "pce", "pcf", "pcg", "pch", "pci"}, 0, 0},
		{"one machine's nodes", []string{"pcb", "pcc", "pcd", "pce"}, 0, 4},
		{"a few of each", []string{"pcb", "pcf"}, 3, 3},
		{"the source alone", nil, 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := all
			sub.Hosts = nil
			for _, h := range all.Hosts {
				if h.Role == capacity.RoleSource || slices.Contains(tt.keep, h.Name) {
					sub.Hosts = append(sub.Hosts, h)
				}
			}
			got := alongside(sub, all)
			if b := got.Machines["box"].Beside; b != tt.box {
				t.Errorf("box: %d hosts beside, want %d", b, tt.box)
			}
			if b := got.Machines["other"].Beside; b != tt.other {
				t.Errorf("other: %d hosts beside, want %d", b, tt.other)
			}
			if got.Machines["box"].Contention != 0.1 || got.Machines["other"].Contention != 0 {
				t.Errorf("contention changed: %+v", got.Machines)
			}
			if len(all.Machines) != 1 || all.Machines["box"].Beside != 0 {
				t.Errorf("the cast's own network changed: %+v", all.Machines)
			}
		})
	}
}

// twoSwitchLab is a lab on one crowded machine: nodes at 1 Gbit/s, the
// last far of them behind a 100 Mbit/s trunk, every host decoding zstd
// dearer than it relays a gigabit's raw stream; the image compresses 3×.
func twoSwitchLab(nodes, far int) (capacity.Network, capacity.Options) {
	net := crowdedLab(nodes, 125e6)
	net.Switches = append(net.Switches, capacity.Switch{Name: "far"})
	net.Links = []capacity.SwitchLink{{A: "switch", B: "far", Capacity: 12.5e6}}
	for i := range net.Hosts {
		net.Hosts[i].Resources.CPU.Decompress = map[string]float64{"zstd": 200e6}
		if i > nodes-far {
			net.Hosts[i].Switch = "far"
		}
	}
	raw := capacity.Compression{Factor: 1}
	return net, capacity.Options{ImageBytes: 1 << 30, Stored: &raw, Compression: capacity.Compression{Codec: "zstd", Factor: 3}}
}

// farNodes names the hosts of net behind its trunk.
func farNodes(net capacity.Network) []string {
	var far []string
	for _, h := range net.Hosts {
		if h.Switch == "far" {
			far = append(far, h.Name)
		}
	}
	return far
}

// Nodes behind a thin trunk are served apart with the stream the whole
// cast's plan chose: compressed, since the trunk makes compression pay,
// even where the source's side alone would be sent raw.
func TestServeApartKeepsTheCastsCompression(t *testing.T) {
	net, opt := twoSwitchLab(6, 2) // the source's side is bound by its machine's CPU
	choose := func(n capacity.Network, compress Compress) (Choice, error) {
		return Choose(n, opt, "", 0, compress, imaging.Raw)
	}
	far := farNodes(net)
	near := net
	for _, name := range far {
		near = without(near, name)
	}
	alone, err := choose(near, CompressAuto)
	if err != nil {
		t.Fatal(err)
	}
	if alone.Result.Plan.Compression.Enabled() {
		t.Fatalf("the source's side alone is sent %s: the lab does not test the case", alone.Send)
	}
	ch, err := choose(net, CompressAuto)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Result.Plan.Compression.Enabled() {
		t.Fatalf("the whole cast is sent %s, want it compressed for the trunk", ch.Send)
	}
	ch = serveApart(net, opt, ch, choose)
	if len(ch.Apart) != len(far) {
		t.Fatalf("served apart %+v, want the far switch's %v", ch.Apart, far)
	}
	if ch.Send != imaging.Zstd || !ch.Result.Plan.Compression.Enabled() {
		t.Errorf("the cast is sent %s (plan %s), want zstd, as the whole cast's plan chose", ch.Send, planName(ch.Result))
	}
	for _, a := range ch.Apart {
		// The trunk carries the compressed stream: 3× its rate of image.
		if max := opt.Compression.Factor * 12.5e6; a.Rate > max*1.001 {
			t.Errorf("%s predicted at %.3g B/s of image, more than the trunk carries (%.3g)", a.Name, a.Rate, max)
		}
	}
}

// Nodes are served apart only where the plan gains as much beside them as
// it seemed to without them: on a machine they share, their decoding takes
// the cores the plan runs on. Here the source's side alone would run 1.57×
// the whole chain's rate, and 1.19× beside the 4 far nodes.
func TestServeApartJudgesTheGainBesideThem(t *testing.T) {
	net, opt := twoSwitchLab(8, 4)
	choose := func(n capacity.Network, compress Compress) (Choice, error) {
		return Choose(n, opt, "", 0, compress, imaging.Raw)
	}
	ch, err := choose(net, CompressAuto)
	if err != nil {
		t.Fatal(err)
	}
	with := ch.Result.Rate
	ch = serveApart(net, opt, ch, choose)
	if len(ch.Apart) != 0 || ch.Result.Rate != with {
		t.Errorf("served apart %+v at %.3g B/s, against %.3g with them in the plan: want them kept in it", ch.Apart, ch.Result.Rate, with)
	}
}

// Nodes served apart on a machine they share with the plan take its cores
// only once their histories are full: not at all in a plan done sooner,
// for the rest of a longer one.
func TestYieldShare(t *testing.T) {
	fill := float64(relay.HistoryBytes - relay.YieldRoom)
	raw := capacity.Result{Rate: 400e6}
	zstd := capacity.Result{Rate: 400e6, Plan: capacity.Plan{Compression: capacity.Compression{Codec: "zstd", Factor: 10}}}
	for _, tt := range []struct {
		name  string
		rate  float64 // of the nodes apart, raw bytes per second
		plan  capacity.Result
		image int64
		want  float64
	}{
		{"the image's size unknown", 12.5e6, raw, 0, 1},
		{"the plan done before the histories fill", 12.5e6, raw, 512 << 20, 0},
		// 12.5 MB/s of stream fill the history in fill/12.5e6 s; the plan
		// takes 20 GB / 400 MB/s = 50 s.
		{"a long plan", 12.5e6, raw, 20e9, 1 - fill/12.5e6/50},
		// 125 MB/s of image are 12.5 of stream, as fast in time.
		{"a compressed stream fills in its own bytes", 125e6, zstd, 20e9, 1 - fill/12.5e6/50},
		{"no rate", 0, raw, 20e9, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opt := capacity.Options{ImageBytes: tt.image}
			if got := yieldShare(tt.rate, tt.plan, opt); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("share %.4f, want %.4f", got, tt.want)
			}
		})
	}
}

// A node that yields still takes the stream in and passes it on: that
// costs its machine's cores, its decoding and writing do not.
func TestPassingOnlyLeavesTheDataPath(t *testing.T) {
	net, opt := twoSwitchLab(4, 2)
	far := farNodes(net)
	plan := capacity.Plan{Tree: capacity.Chain(len(far)), Hosts: append([]string{"source"}, far...), Compression: opt.Compression}
	cores := func(n capacity.Network) float64 {
		t.Helper()
		r, err := capacity.Evaluate(n, plan, opt)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, c := range r.Constraints {
			if c.Kind == capacity.MachineCPULimit {
				sum += c.Coef
			}
		}
		return sum
	}
	all, passing := cores(net), cores(passingOnly(net, far))
	// The source's feed and the nodes' streams in and out stay.
	if passing <= 0 || passing >= all/2 {
		t.Errorf("passing the stream on costs %.3g core-s per byte, the whole work %.3g: want some, and well under half", passing, all)
	}
	if again := cores(net); again != all {
		t.Errorf("the cast's network changed: %.3g core-s per byte, was %.3g", again, all)
	}
}
