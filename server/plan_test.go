package server

import (
	"strings"
	"testing"

	"dolly/capacity"
	"dolly/imaging"
)

// crowdedLab is a source and n nodes on one machine of two cores, each
// link of the given speed: a lab of namespaces, or a demo, on one box.
func crowdedLab(n int, link float64) capacity.Network {
	res := capacity.Resources{Model: capacity.ModelDolly, Cores: 2, CPU: capacity.CPURates{
		Net: 8e9, Copy: 14e9, Digest: 20e9, Disk: 8e9,
		Decompress: map[string]float64{"zstd": 3e9}, Compress: map[string]float64{"zstd": 300e6},
	}}
	net := capacity.Network{Switches: []capacity.Switch{{Name: "switch"}}, LinkEfficiency: capacity.TCPEthernetEfficiency}
	for i := 0; i <= n; i++ {
		h := capacity.Host{Name: "pc" + string(rune('a'+i)), Switch: "switch", Link: link, Resources: res, Machine: "box"}
		if i == 0 {
			h.Name, h.Role = "source", capacity.RoleSource
		}
		net.Hosts = append(net.Hosts, h)
	}
	return net
}

// Plans are compared with a crowded machine's CPU at twice its figures' cost:
// the figures leave out what the hosts cost each other. Not when the
// machine's nodes measured that together (a crowd probe): then with the
// codecs at codecDoubt times their figures' cost, so that a plan leaning on
// them must beat a raw one by more than that.
func TestChooseDoubtsACrowdedMachine(t *testing.T) {
	raw := capacity.Compression{Codec: "zstd", Factor: 1}
	tests := []struct {
		name     string
		nodes    int
		link     float64
		measured bool // the crowd was measured
		wantComp string
		wantNote string // "" for none
	}{
		// Gigabit: zstd's CPU-bound prediction is ahead of the raw chain, but
		// not at twice the CPU's cost: the raw chain runs.
		{"gigabit, 8 nodes", 8, 125e6, false, "none", "hosts share on 2 cores"},
		// Measured together: zstd is ahead by 9%, and leans on its codecs,
		// the raw chain on the links.
		{"gigabit, 8 nodes, crowd measured", 8, 125e6, true, "none", "leans on its codecs (bound by CPU of machine box, shared by 9 hosts), whose figures were timed alone"},
		// Slower links: zstd is ahead by more than its codecs may be off.
		{"half gigabit, 8 nodes, crowd measured", 8, 60e6, true, "zstd", ""},
		// Fast Ethernet: zstd is ahead even so, and runs.
		{"fast ethernet, 8 nodes", 8, 12.5e6, false, "zstd", ""},
		// One node: the machine is not crowded, the model's best runs.
		{"gigabit, 1 node", 1, 125e6, false, "zstd", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := capacity.Options{Compression: capacity.Compression{Codec: "zstd", Factor: 8}, ImageBytes: 1 << 30,
				Stored: &raw, ZeroFraction: 0.6}
			net := crowdedLab(tt.nodes, tt.link)
			if tt.measured {
				net.Machines = map[string]capacity.Machine{"box": {Crowded: true}}
			}
			ch, err := Choose(net, opt, "", 0, CompressAuto, imaging.Raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := ch.Result.Plan.Compression.Name(); got != tt.wantComp {
				t.Errorf("chose %s, %s (%.0f MB/s); want %s; ranked first: %s, %s at %.0f MB/s", ch.Result.Plan.Name(), got, ch.Result.Rate/1e6,
					tt.wantComp, ch.Ranked[0].Plan.Name(), ch.Ranked[0].Plan.Compression.Name(), ch.Ranked[0].Rate/1e6)
			}
			for _, r := range ch.Ranked[:min(4, len(ch.Ranked))] {
				t.Logf("%s %s %.0f %s", r.Plan.Name(), r.Plan.Compression.Name(), r.Rate/1e6, r.Bottleneck)
			}
			notes := strings.Join(ch.Notes, "\n")
			if tt.wantNote == "" && strings.Contains(notes, " runs, not ") || !strings.Contains(notes, tt.wantNote) {
				t.Errorf("notes %q, want one saying %q", ch.Notes, tt.wantNote)
			}
		})
	}
}

// The doubter's slower codecs are a copy: the network the cast plans on
// keeps its figures.
func TestSlowerCodecsLeavesTheNetwork(t *testing.T) {
	net := crowdedLab(2, 125e6)
	slow := slowerCodecs(net, 2)
	for i, h := range slow.Hosts {
		if got := h.Resources.CPU.Decompress["zstd"]; got != 1.5e9 {
			t.Errorf("%s decodes at %.0f in the doubted network, want 1.5e9", h.Name, got)
		}
		if got := h.Resources.CPU.Compress["zstd"]; got != 150e6 {
			t.Errorf("%s compresses at %.0f in the doubted network, want 150e6", h.Name, got)
		}
		if got := net.Hosts[i].Resources.CPU.Decompress["zstd"]; got != 3e9 {
			t.Errorf("%s's own figure changed to %.0f", h.Name, got)
		}
	}
}

// A tree or star runs only if it beats the best chain the operator allows
// by more than chainMargin, unless links alone bind both; the chain that
// stands in is the fastest one.
func TestPreferChain(t *testing.T) {
	zstd := capacity.Compression{Codec: "zstd", Factor: 3}
	result := func(kind capacity.Kind, fanout int, comp capacity.Compression, rate float64) capacity.Result {
		return capacity.Result{Plan: capacity.Plan{Tree: capacity.Tree{Kind: kind, Fanout: fanout}, Compression: comp}, Rate: rate}
	}
	linkBound := func(r capacity.Result) capacity.Result {
		r.Binding = []capacity.Constraint{{Kind: capacity.LinkLimit}}
		return r
	}
	rate := func(r capacity.Result) float64 { return r.Rate }
	anyComp := func(capacity.Compression) bool { return true }
	rawOnly := func(c capacity.Compression) bool { return !c.Enabled() }
	tests := []struct {
		name      string
		pool      []capacity.Result
		chosen    int // index in pool
		allowed   func(capacity.Compression) bool
		wantChain bool
		wantRate  float64 // of the chain that runs instead
	}{
		{"a 3-tree 10% ahead", []capacity.Result{result(capacity.KindTree, 3, zstd, 110e6), result(capacity.KindChain, 1, zstd, 100e6)}, 0, anyComp, true, 100e6},
		{"a 3-tree 20% ahead", []capacity.Result{result(capacity.KindTree, 3, zstd, 120e6), result(capacity.KindChain, 1, zstd, 100e6)}, 0, anyComp, false, 0},
		{"a star 14% ahead of the faster chain",
			[]capacity.Result{result(capacity.KindStar, 8, capacity.Compression{}, 114e6), result(capacity.KindChain, 1, capacity.Compression{}, 60e6), result(capacity.KindChain, 1, zstd, 100e6)}, 0, anyComp, true, 100e6},
		{"the only chain allowed is far behind",
			[]capacity.Result{result(capacity.KindTree, 2, capacity.Compression{}, 110e6), result(capacity.KindChain, 1, capacity.Compression{}, 50e6), result(capacity.KindChain, 1, zstd, 105e6)}, 0, rawOnly, false, 0},
		{"links alone bind both, the star 0% ahead",
			[]capacity.Result{linkBound(result(capacity.KindStar, 4, capacity.Compression{}, 100e6)), linkBound(result(capacity.KindChain, 1, capacity.Compression{}, 100e6))}, 0, anyComp, false, 0},
		{"links bind the star, the CPU the chain",
			[]capacity.Result{linkBound(result(capacity.KindStar, 4, capacity.Compression{}, 105e6)), result(capacity.KindChain, 1, capacity.Compression{}, 100e6)}, 0, anyComp, true, 100e6},
		{"a chain is chosen already", []capacity.Result{result(capacity.KindChain, 1, zstd, 100e6), result(capacity.KindTree, 3, zstd, 99e6)}, 0, anyComp, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := preferChain(tt.pool, tt.allowed, tt.pool[tt.chosen], rate)
			if ok != tt.wantChain || ok && got.Rate != tt.wantRate {
				t.Errorf("preferChain: chain %v at %.0f MB/s; want %v at %.0f", ok, got.Rate/1e6, tt.wantChain, tt.wantRate/1e6)
			}
		})
	}
}
