package capacity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestETA(t *testing.T) {
	opt := Options{ImageBytes: 100 * MB, Startup: 500 * time.Millisecond}
	tests := []struct {
		rate  float64
		depth int
		hop   time.Duration
		want  time.Duration
	}{
		{10 * MB, 1, 100 * time.Millisecond, 10*time.Second + 500*time.Millisecond},
		{10 * MB, 3, 100 * time.Millisecond, 10*time.Second + 200*time.Millisecond + 500*time.Millisecond},
		{100 * MB, 101, 10 * time.Millisecond, time.Second + time.Second + 500*time.Millisecond},
		// Hops that hold nothing cost nothing, however deep.
		{10 * MB, 50, 0, 10*time.Second + 500*time.Millisecond},
	}
	for _, tt := range tests {
		if got := ETA(tt.rate, tt.depth, tt.hop, opt); got != tt.want {
			t.Errorf("ETA(%v MB/s, depth %d, hop %v) = %v, want %v", tt.rate/MB, tt.depth, tt.hop, got, tt.want)
		}
	}
	if got := ETA(0, 1, time.Second, opt); got < 100*365*24*time.Hour {
		t.Errorf("ETA at rate 0 = %v, want practically forever", got)
	}
}

// TestChainFillCost: a chain of n nodes costs more than one node by what
// its n−1 lower hops delay the stream. Store-and-forward nodes (the
// paper's model) hold a frame each (segmentation, paper 002 section 2.1);
// dolly's relays cut through and delay it by their wake-up (the least
// batch's time on a slow link) and a default one more while a link or
// their own CPU sets the rate, by nothing while the source's CPU does.
func TestChainFillCost(t *testing.T) {
	// Relaying is free here, so the rate is the same at any length.
	dollyCPU := Resources{Model: ModelDolly, Cores: 1, CPU: CPURates{Net: 1e18, Copy: 300 * MB, Digest: 300 * MB}}
	fastSource := Resources{Model: ModelDolly, Cores: 8, CPU: CPURates{Net: 1e18, Copy: 300 * MB, Digest: 300 * MB}}
	const slowLink = 1 * MB // a 16 KiB batch takes 16 ms on it, four default wake-ups
	tests := []struct {
		name     string
		res      Resources
		source   *Resources // the source's, if not res
		link     float64
		hopBytes float64       // bytes each lower hop holds (a frame), or
		hop      time.Duration // the time it adds
	}{
		{"paper model", patagonia, nil, gbe, 4 << 20, 0},
		{"dolly, link-bound", Resources{Model: ModelDolly}, nil, gbe, 0, 2 * RelayWake},
		{"dolly, on a slow link", Resources{Model: ModelDolly}, nil, slowLink, RelayMinBatch, RelayWake},
		{"dolly, bound by the source's CPU", dollyCPU, nil, 10 * gbe, 0, 0},
		{"dolly, bound by the nodes' CPU", dollyCPU, &fastSource, 10 * gbe, 0, 2 * RelayWake},
	}
	for _, tt := range tests {
		opt := Options{ImageBytes: 2e9, FrameBytes: 4 << 20}
		eval := func(n int) Result {
			net := oneSwitch(n, tt.link, tt.res)
			if tt.source != nil {
				net.Hosts[0].Resources = *tt.source
			}
			r, err := Evaluate(net, Plan{Tree: Chain(n), Hosts: hostNames(net)}, opt)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		one := eval(1)
		for _, n := range []int{2, 10, 50} {
			r := eval(n)
			if math.Abs(r.Rate-one.Rate) > 1e-9*one.Rate {
				t.Fatalf("%s: chain of %d at %v, one node at %v: the test wants one rate", tt.name, n, r.Rate, one.Rate)
			}
			extra := r.ETA - one.ETA
			want := time.Duration(float64(n-1) * (tt.hopBytes/r.Rate*float64(time.Second) + float64(tt.hop)))
			if d := extra - want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("%s: chain of %d: %v more than one node, want %v", tt.name, n, extra, want)
			}
		}
	}
}

// TestChainFillOnACrowdedMachine: nodes that share a machine whose CPU
// sets the rate forward in their turn, and their relays wake less often
// (CrowdedRelayWake): each lower hop delays the stream by such a wake-up
// and a default one.
func TestChainFillOnACrowdedMachine(t *testing.T) {
	const n = 8
	res := Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{Net: 1e18, Copy: 300 * MB, Digest: 300 * MB}}
	net := oneSwitch(n, 10*gbe, res)
	for i := range net.Hosts {
		net.Hosts[i].Machine = "box"
	}
	opt := Options{ImageBytes: 2e9, FrameBytes: 4 << 20}
	r, err := Evaluate(net, Plan{Tree: Chain(n), Hosts: hostNames(net)}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Binding) == 0 || r.Binding[0].Kind != MachineCPULimit {
		t.Fatalf("bound by %s, the test wants the machine's CPU", r.Bottleneck)
	}
	if !r.CrowdedWake() {
		t.Errorf("CrowdedWake() = false on a plan its machine's cores bind")
	}
	want := ETA(r.Rate, n, CrowdedRelayWake+RelayWake, opt)
	if r.ETA != want {
		t.Errorf("ETA %v, want %v: the image at %.1f MB/s and a crowded wake-up and a default one at each of %d lower hops", r.ETA, want, r.Rate/MB, n-1)
	}
}

func TestRankCandidates(t *testing.T) {
	tests := []struct {
		nodes       int
		compression Compression
		want        []string // plan/compression, in candidate order
	}{
		{1, Compression{}, []string{"chain/none"}},
		{2, Compression{}, []string{"chain/none", "star/none"}},
		{3, Compression{"gzip", 2}, []string{"chain/none", "2-tree/none", "star/none", "chain/gzip", "2-tree/gzip", "star/gzip"}},
		{9, Compression{"gzip", 1}, []string{"chain/none", "2-tree/none", "3-tree/none", "4-tree/none", "5-tree/none", "star/none"}},
	}
	for _, tt := range tests {
		res := patagonia
		net := oneSwitch(tt.nodes, gbe, res)
		f, err := compile(net)
		if err != nil {
			t.Fatal(err)
		}
		plans, err := f.candidates(Options{Compression: tt.compression}.withDefaults())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range plans {
			got = append(got, p.Name()+"/"+p.Compression.Name())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%d nodes: candidates %v, want %v", tt.nodes, got, tt.want)
		}
	}
}

func TestRankOrder(t *testing.T) {
	net := oneSwitch(5, fe, patagonia)
	for _, opt := range []Options{{ImageBytes: 2e9}, {}} {
		results, err := Rank(net, opt)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(results); i++ {
			a, b := results[i-1], results[i]
			if opt.ImageBytes > 0 && a.ETA > b.ETA {
				t.Errorf("%s (%v) ranked before %s (%v)", a.Plan.Name(), a.ETA, b.Plan.Name(), b.ETA)
			}
			if opt.ImageBytes == 0 && a.Rate < b.Rate {
				t.Errorf("%s (%v) ranked before %s (%v)", a.Plan.Name(), a.Rate, b.Plan.Name(), b.Rate)
			}
		}
		if results[0].Plan.Name() != "chain" {
			t.Errorf("best plan %s, want the chain", results[0].Plan.Name())
		}
	}
}

func TestRankErrors(t *testing.T) {
	noSource := oneSwitch(2, gbe, patagonia)
	noSource.Hosts[0].Role = RoleNode
	twoSources := oneSwitch(2, gbe, patagonia)
	twoSources.Hosts[1].Role = RoleSource
	alone := oneSwitch(0, gbe, patagonia)
	tests := []struct {
		name string
		net  Network
		want string
	}{
		{"no source", noSource, "no source"},
		{"two sources", twoSources, "both sources"},
		{"no nodes", alone, "no nodes"},
	}
	for _, tt := range tests {
		if _, err := Rank(tt.net, Options{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestPlacementKeepsSwitchesTogether: with nodes listed alternately on two
// switches, the planner's chain still crosses the inter-switch link once.
func TestPlacementKeepsSwitchesTogether(t *testing.T) {
	res := Resources{Model: ModelBasic, Switching: 30 * MB}
	net := Network{
		Switches: []Switch{{Name: "sw1"}, {Name: "sw2"}},
		Links:    []SwitchLink{{A: "sw1", B: "sw2", Capacity: gbe}},
		Hosts:    []Host{{Name: "src", Switch: "sw1", Link: gbe, Role: RoleSource, Resources: res}},
	}
	for i := range 10 {
		sw := []string{"sw2", "sw1"}[i%2]
		net.Hosts = append(net.Hosts, Host{Name: fmt.Sprintf("n%d", i), Switch: sw, Link: gbe, Resources: res})
	}
	results, err := Rank(net, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Plan.Name() != "chain" {
			continue
		}
		if c := find(t, r, LinkLimit, "sw1→sw2"); c.Streams != 1 {
			t.Errorf("chain crosses sw1→sw2 %d times, want once: %v", c.Streams, r.Plan.Hosts)
		}
		if has(r, LinkLimit, "sw2→sw1") {
			t.Errorf("chain comes back over sw2→sw1: %v", r.Plan.Hosts)
		}
		if got := r.Plan.Hosts[:6]; !slices.Equal(got, []string{"src", "n1", "n3", "n5", "n7", "n9"}) {
			t.Errorf("chain starts %v, want the source's switch first", got)
		}
	}
}

// TestPlacementPutsFastLinksFirst: the vertices of an n-ary tree that
// forward should get the fast links.
func TestPlacementPutsFastLinksFirst(t *testing.T) {
	net := oneSwitch(6, fe, patagonia)
	net.Hosts[5].Link = gbe
	net.Hosts[6].Link = gbe
	f, err := compile(net)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := f.candidates(Options{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans {
		if p.Name() != "2-tree" {
			continue
		}
		// Vertices 1 and 2 each forward to two children.
		if got := p.Hosts[1:3]; !slices.Equal(got, []string{"n05", "n06"}) {
			t.Errorf("forwarding vertices on %v, want the Gigabit hosts n05 and n06: %v", got, p.Hosts)
		}
	}
}

// TestTreeSubtreesStayOnTheirSwitch: on a large lab of 24-port edge
// switches an n-ary tree's subtrees stay on their switches. A switch's
// run of vertices in pre-order sends to at most about fanout·depth
// vertices elsewhere (filling the vertices breadth-first would send
// fanout·24), so the inter-switch links never bind.
func TestTreeSubtreesStayOnTheirSwitch(t *testing.T) {
	results, err := Rank(labNetwork(1000), Options{})
	if err != nil {
		t.Fatal(err)
	}
	isTrunk := func(c Constraint) bool {
		return c.Kind == LinkLimit && strings.HasPrefix(c.Subject, "edge") && strings.Contains(c.Subject, "core")
	}
	for _, r := range results {
		if r.Plan.Tree.Kind != KindTree {
			continue
		}
		limit := r.Plan.Tree.Fanout * r.Depth
		for _, c := range r.Constraints {
			if isTrunk(c) && c.Streams > limit {
				t.Errorf("%s: %s shared by %d channels, want at most %d", r.Plan.Name(), c.Subject, c.Streams, limit)
			}
		}
		for _, c := range r.Binding {
			if isTrunk(c) {
				t.Errorf("%s: bound by the inter-switch link %s", r.Plan.Name(), c.Describe())
			}
		}
	}
}

func TestArrangeMatchesRank(t *testing.T) {
	net := labNetwork(60)
	results, err := Rank(net, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		p, err := Arrange(net, r.Plan.Tree, r.Plan.Compression)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Hosts, r.Plan.Hosts) {
			t.Fatalf("%s: Arrange placed %v, Rank %v", r.Plan.Name(), p.Hosts[:5], r.Plan.Hosts[:5])
		}
	}
	if _, err := Arrange(net, Chain(3), Compression{}); err == nil {
		t.Fatal("a tree of the wrong size was arranged")
	}
}
