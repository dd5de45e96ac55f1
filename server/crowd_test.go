package server

import (
	"maps"
	"math"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/dolly/relay"
	"dolly/imaging"
)

func TestCrowdSlowdownAndContention(t *testing.T) {
	// One node alone: 1 ns of CPU a byte, so 2 cores would push 2 GB/s.
	const alone = 1e-9
	tests := []struct {
		name       string
		rate       float64
		hosts      int
		slowdown   float64
		contention float64
	}{
		{"as fast as alone", 2e9, 25, 1, 0},
		{"faster than alone counts as alone", 3e9, 25, 1, 0},
		{"half as fast", 1e9, 25, 2, 1.0 / 24},
		{"a quarter as fast, 5 hosts", 0.5e9, 5, 4, 0.75},
		{"far slower is capped", 0.01e9, 3, 200, 1},
		{"one host has no one to contend with", 1e9, 1, 2, 0},
		{"nothing measured", 0, 25, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := crowd{nodes: 24, cores: 2, rate: tt.rate, alone: alone}
			if got := c.slowdown(); math.Abs(got-tt.slowdown) > 1e-9 {
				t.Errorf("slowdown = %v, want %v", got, tt.slowdown)
			}
			if got := c.contention(tt.hosts); math.Abs(got-tt.contention) > 1e-9 {
				t.Errorf("contention(%d) = %v, want %v", tt.hosts, got, tt.contention)
			}
		})
	}
}

// A node times only the decoders some plan of the cast would use.
func TestUnusedDecoders(t *testing.T) {
	tests := []struct {
		stored   imaging.Encoding
		compress Compress
		want     []string
	}{
		{imaging.Raw, CompressAuto, []string{"gzip"}},
		{imaging.Raw, CompressYes, []string{"gzip"}},
		{imaging.Raw, CompressNo, []string{"zstd", "gzip"}},
		{imaging.Zstd, CompressAuto, []string{"gzip"}},
		{imaging.Gzip, CompressAuto, []string{"zstd"}},
		{imaging.Gzip, CompressNo, []string{"zstd", "gzip"}},
	}
	for _, tt := range tests {
		s := &Server{cfg: Config{Compress: tt.compress}, img: &imaging.Image{Encoding: tt.stored}}
		if got := s.unusedDecoders(); !slices.Equal(got, tt.want) {
			t.Errorf("%s image, -compress %s: unused %q, want %q", tt.stored, tt.compress, got, tt.want)
		}
	}
}

// With a topology file, the crowd its machine's nodes measured is the
// model's all the same, unless the file gives that machine's contention;
// the file's own figures are left as they were.
func TestTopologyKeepsTheMeasuredCrowd(t *testing.T) {
	for _, tt := range []struct {
		name     string
		machines string // the file's "machines", if any
		want     float64
	}{
		{"measured", "", 0.5}, // 3 hosts joined: the slowdown of 2 is 1 + 0.5·(3−1)
		{"the file's word", `, "machines": {"lab": {"contention": 0.04}}`, 0.04},
		{"measured, beside the file's cast cost", `, "machines": {"lab": {"cast_cpu_per_gb": 2.5}}`, 0.5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			topo, err := capacity.ParseTopology([]byte(`{"switches": [{"name": "sw"}], "hosts": [
				{"name": "srv", "switch": "sw", "link": "1Gbit", "role": "source", "machine": "lab"},
				{"name": "pc01", "switch": "sw", "link": "1Gbit", "machine": "lab"},
				{"name": "pc02", "switch": "sw", "link": "1Gbit", "machine": "lab"},
				{"name": "pc03", "switch": "sw", "link": "1Gbit", "machine": "lab"}]` + tt.machines + `}`))
			if err != nil {
				t.Fatal(err)
			}
			before := maps.Clone(topo.Network.Machines)
			lone := &capacity.Probe{Cores: 2, RelayBytesPerSec: 2e9, NetStreamBytesPerSec: 4e9, MemcpyBytesPerSec: 4e9}
			probes := []capacity.Probe{{Hostname: "srv", Cores: 2}}
			var ready []*nodeState
			for _, name := range []string{"pc02", "pc01"} { // not in the file's order
				probes = append(probes, probeFor(name, lone))
				ready = append(ready, &nodeState{name: name, machine: "key"})
			}
			net, err := fromTopology(topo, probes)
			if err != nil {
				t.Fatal(err)
			}
			machineOf := topologyMachines(net, ready, "key")
			if want := []string{"key", "key", "key"}; !slices.Equal(machineOf, want) {
				t.Fatalf("machines %q, want %q", machineOf, want)
			}
			// The path twice as slow as alone: 2 cores over 0.8 GB/s at
			// 1.25 ns a byte.
			c := crowd{nodes: 2, cores: 2, rate: 0.8e9, alone: probe.PathCost(*lone)}
			markCrowds(&net, machineOf, map[string]crowd{"key": c})
			if got := net.Machines["lab"].Contention; math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("contention %v, want %v", got, tt.want)
			}
			if !maps.Equal(topo.Network.Machines, before) {
				t.Errorf("the file's machines changed: %+v, were %+v", topo.Network.Machines, before)
			}
		})
	}
}

// A crowd that pushed its data path far cheaper than the lone probe allows
// shows that probe disturbed, and its path figures give way to the
// crowd's; a crowd within crowdCheaper of it leaves them be.
func TestCrowdCorrectsADisturbedProbe(t *testing.T) {
	// A demo's lone probe whose loopback stream ran at a twentieth of its
	// usual rate: 8.5 ns a byte for the path, so 2 cores would push
	// 235 MB/s.
	lone := capacity.Probe{Cores: 2, RelayBytesPerSec: 260e6, NetStreamBytesPerSec: 437e6, MemcpyBytesPerSec: 25e9}
	alone := probe.PathCost(lone)
	tests := []struct {
		name      string
		rate      float64 // the crowd's, all nodes together
		disturbed bool
	}{
		{"as fast as alone", 2 / alone, false},
		{"cheaper, as a crowd's batches are", 1.7 * 2 / alone, false},
		{"just within the bound", 2.49 * 2 / alone, false},
		{"just past the bound", 2.51 * 2 / alone, true},
		{"the disturbed demo's crowd", 1594e6, true},
		{"slower than alone", 0.5 * 2 / alone, false},
		{"nothing measured", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := crowd{nodes: 24, cores: 2, rate: tt.rate, alone: alone}
			if got := c.disturbed(); got != tt.disturbed {
				t.Fatalf("disturbed = %v, want %v", got, tt.disturbed)
			}
			got := c.correct(lone)
			if !tt.disturbed {
				if !reflect.DeepEqual(got, lone) {
					t.Errorf("corrected %+v, want the probe as it was, %+v", got, lone)
				}
				return
			}
			if want := 2 / tt.rate; math.Abs(probe.PathCost(got)-want) > 1e-6*want {
				t.Errorf("path cost %.4g s/B, want the crowd's %.4g", probe.PathCost(got), want)
			}
			if got.MemcpyBytesPerSec != lone.MemcpyBytesPerSec {
				t.Errorf("memory copy %.4g, want %.4g: it was timed on one thread", got.MemcpyBytesPerSec, lone.MemcpyBytesPerSec)
			}
			// Both path figures scale alike: the crowd says what the path
			// costs in all, not which part of it was disturbed.
			if r, w := got.RelayBytesPerSec/got.NetStreamBytesPerSec, lone.RelayBytesPerSec/lone.NetStreamBytesPerSec; math.Abs(r-w) > 1e-9*w {
				t.Errorf("relay over stream %.6g, want %.6g", r, w)
			}
			if got.RelayBytesPerSec <= lone.RelayBytesPerSec {
				t.Errorf("relay %.4g, want more than the disturbed %.4g", got.RelayBytesPerSec, lone.RelayBytesPerSec)
			}
		})
	}
}

// withPathCost leaves a probe whose path was not measured, or whose memory
// copy alone costs more than the path should, as it is.
func TestWithPathCostLeavesWhatItCannotScale(t *testing.T) {
	p := capacity.Probe{RelayBytesPerSec: 1e9, NetStreamBytesPerSec: 4e9, MemcpyBytesPerSec: 10e9}
	if got := withPathCost(p, 0.05e-9); !reflect.DeepEqual(got, p) { // below the copy's 0.1 ns
		t.Errorf("scaled below the copy's cost: %+v", got)
	}
	noRelay := p
	noRelay.RelayBytesPerSec = 0
	if got := withPathCost(noRelay, 1e-9); !reflect.DeepEqual(got, noRelay) {
		t.Errorf("scaled a probe without a relay figure: %+v", got)
	}
	if got := withPathCost(p, 2.1e-9); math.Abs(probe.PathCost(got)-2.1e-9) > 1e-18 {
		t.Errorf("path cost %.4g, want 2.1e-9", probe.PathCost(got))
	}
}

// A crowd whose slowdown is past crowdDoubt is measured again, and the
// faster window stands; the preview says what both pushed.
func TestDoubtedCrowdIsMeasuredAgain(t *testing.T) {
	const alone = 1e-9 // 2 cores would push 2 GB/s
	machines := map[string][]*nodeState{"steady": {{name: "a"}}, "slow moment": {{name: "b"}}, "twice": {{name: "c"}}}
	crowds := map[string]crowd{
		"steady":      {nodes: 24, cores: 2, rate: 1.9e9, alone: alone},
		"twice":       {nodes: 24, cores: 2, rate: 1.0e9, alone: alone}, // a slowdown of 2: within the doubt
		"slow moment": {nodes: 24, cores: 2, rate: 0.6e9, alone: alone},
	}
	if got := slices.Sorted(maps.Keys(doubtedCrowds(crowds, machines, false))); !slices.Equal(got, []string{"slow moment"}) {
		t.Fatalf("doubted %q, want the crowd with a slowdown of 3.3 alone", got)
	}
	// Where a machine's CPU binds the plan, the preview is the slowdown's.
	if got := slices.Sorted(maps.Keys(doubtedCrowds(crowds, machines, true))); !slices.Equal(got, []string{"slow moment", "twice"}) {
		t.Fatalf("doubted %q where the CPU binds, want the crowds with slowdowns of 2 and 3.3", got)
	}
	tests := []struct {
		name          string
		first, second float64
		want, other   float64
		note          string
	}{
		{"a slow moment in the first window", 0.6e9, 2.1e9, 2.1e9, 0.6e9,
			"pushed their data path at once: 2100.0 MB/s in all (the faster of two windows: the other pushed 600.0); the model counts every CPU figure of that machine at 1.0×"},
		{"a machine slow both times", 0.6e9, 0.5e9, 0.6e9, 0.5e9,
			"pushed their data path at once: 600.0 MB/s in all (the faster of two windows: the other pushed 500.0); the model counts every CPU figure of that machine at 3.3×"},
	}
	for _, tt := range tests {
		c := func(rate float64) crowd { return crowd{nodes: 24, cores: 2, rate: rate, alone: alone} }
		got := fasterCrowd(c(tt.first), c(tt.second))
		if got.rate != tt.want || got.other != tt.other {
			t.Errorf("%s: rate %.4g, other %.4g; want %.4g, %.4g", tt.name, got.rate, got.other, tt.want, tt.other)
		}
		if note := got.note(); !strings.Contains(note, tt.note) {
			t.Errorf("%s: note %q, want it to say %q", tt.name, note, tt.note)
		}
	}
	// A lone probe the crowd shows disturbed is named so.
	disturbed := crowd{nodes: 24, cores: 2, rate: 6e9, alone: alone}
	if note := disturbed.note(); !strings.Contains(note, "3.0× what one node's probe allows; that probe was disturbed") {
		t.Errorf("note %q, want it to name the lone probe disturbed", note)
	}
}

// The model takes the crowd's cost for the data path of a machine whose
// lone probe the crowd shows disturbed, on the figures it plans with: the
// nodes' probes merged with the source's on the same machine first, whose
// stream figure replaces a disturbed one.
func TestNetworkTakesTheCrowdsPathForADisturbedProbe(t *testing.T) {
	// A demo's lone probe whose loopback stream ran at a twentieth of its
	// usual rate, beside the source's good stream figure.
	lone := &capacity.Probe{Cores: 2, RelayBytesPerSec: 260e6, NetStreamBytesPerSec: 437e6, MemcpyBytesPerSec: 25e9}
	src := capacity.Probe{Cores: 2, NetStreamBytesPerSec: 7.9e9, MemcpyBytesPerSec: 25e9}
	for _, tt := range []struct {
		name string
		rate float64 // what the crowd pushed; 0: not measured
		want float64 // the nodes' path cost in the model, s/B
	}{
		// Merged with the source's stream, the path costs 4.14 ns, 3.3
		// times the crowd's 1.25.
		{"disturbed", 1594e6, 2 / 1594e6},
		// The lone path twice the crowd's: within its batches' gain.
		{"crowd within its batches' gain", 2 / probe.PathCost(*lone) * 2, 1/260e6 + 2/7.9e9 + 1/25e9},
		{"no crowd", 0, 1/260e6 + 2/7.9e9 + 1/25e9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{cfg: Config{Yes: true}, probe: probe.Report{Probe: src}}
			ready := onTheSourcesMachine(t, s, lone)
			var figs netFigures
			if tt.rate > 0 {
				figs.crowds = map[string]crowd{ready[0].machine: {nodes: 2, cores: 2, rate: tt.rate, alone: probe.PathCost(*lone)}}
			}
			net, _ := s.network(ready, figs)
			for _, h := range nodeHosts(t, net, len(ready)) {
				cpu := h.Resources.CPU
				if got := 1/cpu.Relay + 2/cpu.Net + 1/cpu.Copy; math.Abs(got-tt.want) > 1e-6*tt.want {
					t.Errorf("%s: path %.4g s/B, want %.4g", h.Name, got, tt.want)
				}
			}
			if src := net.Hosts[0].Resources.CPU; src.Relay != 0 || src.Net != 7.9e9 {
				t.Errorf("the source's figures changed: relay %.4g, stream %.4g", src.Relay, src.Net)
			}
		})
	}
}

// onTheSourcesMachine returns two nodes on s's own machine, connected over
// loopback, the first of which measured it (lone).
func onTheSourcesMachine(t *testing.T, s *Server, lone *capacity.Probe) []*nodeState {
	pair := controlPairs(t)
	conn := func() *control.Conn {
		srv, _ := pair()
		return srv
	}
	ready := []*nodeState{{name: "pc01", conn: conn(), probe: lone}, {name: "pc02", conn: conn()}}
	m := s.sourceMachine(ready)
	for _, n := range ready {
		n.machine = m
	}
	return ready
}

// nodeHosts returns the hosts of net other than the source, of which
// there must be want.
func nodeHosts(t *testing.T, net capacity.Network, want int) []capacity.Host {
	t.Helper()
	var nodes []capacity.Host
	for _, h := range net.Hosts {
		if h.Role != capacity.RoleSource {
			nodes = append(nodes, h)
		}
	}
	if len(nodes) != want {
		t.Fatalf("%d nodes in the network, want %d", len(nodes), want)
	}
	return nodes
}

// controlPairs returns a function that connects a control connection over
// loopback and returns the server's end and the node's; all are closed
// when the test ends.
func controlPairs(t *testing.T) func() (*control.Conn, *control.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return func() (*control.Conn, *control.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); c.Close() })
		return control.NewConn(a), control.NewConn(c)
	}
}

// The relays of a crowded machine wake less often where its CPU holds the
// plan back, or nearly; where the links do, their default stands.
func TestWakeFor(t *testing.T) {
	cpu := func(bound float64) capacity.Constraint {
		// 2 cores at 1 ns a byte: 2 GB/s, scaled to the bound.
		return capacity.Constraint{Kind: capacity.MachineCPULimit, Subject: "m", Streams: 25, Coef: 2 / bound, Cap: 2}
	}
	link := capacity.Constraint{Kind: capacity.LinkLimit, Subject: "pc1→switch", Streams: 1, Coef: 0.1, Cap: 12.5e6}
	for _, tt := range []struct {
		name string
		ch   Choice
		want time.Duration
	}{
		{"the cores bind", Choice{Modeled: true, Result: capacity.Result{Rate: 120e6, Constraints: []capacity.Constraint{cpu(120e6), link}}}, relay.CrowdedWakeDelay},
		{"the cores nearly bind", Choice{Modeled: true, Result: capacity.Result{Rate: 120e6, Constraints: []capacity.Constraint{cpu(170e6), link}}}, relay.CrowdedWakeDelay},
		{"the links bind, the cores far off", Choice{Modeled: true, Result: capacity.Result{Rate: 23e6, Constraints: []capacity.Constraint{cpu(70e6), link}}}, 0},
		{"the cores of an uncrowded machine bind", Choice{Modeled: true, Result: capacity.Result{Rate: 120e6, Constraints: []capacity.Constraint{
			{Kind: capacity.MachineCPULimit, Subject: "m", Streams: 2, Coef: 8 / 120e6, Cap: 8}, link}}}, 0},
		{"no shared machine", Choice{Modeled: true, Result: capacity.Result{Rate: 23e6, Constraints: []capacity.Constraint{link}}}, 0},
		{"not modelled", Choice{Result: capacity.Result{Rate: 120e6, Constraints: []capacity.Constraint{cpu(120e6)}}}, 0},
	} {
		if got := wakeFor(tt.ch); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A figure is measured again only while the join keeps within its budget
// of 3 s from the last node joining, room kept for a round that runs long
// and for the plan.
func TestJoinHasRoom(t *testing.T) {
	tests := []struct {
		name         string
		since, again time.Duration // since the last node joined; what measuring again costs
		want         bool
	}{
		{"early in the join", 1500 * time.Millisecond, 800 * time.Millisecond, true},
		{"the round would end past the budget", 2500 * time.Millisecond, 600 * time.Millisecond, false},
		{"no room left for the plan", 2000 * time.Millisecond, 700 * time.Millisecond, false},
		{"past the budget already", 3200 * time.Millisecond, 10 * time.Millisecond, false},
	}
	for _, tt := range tests {
		s := &Server{lastJoined: time.Now().Add(-tt.since)}
		if got := s.joinHasRoom(tt.again); got != tt.want {
			t.Errorf("%s: room %v, want %v", tt.name, got, tt.want)
		}
	}
	if !(&Server{}).joinHasRoom(time.Second) {
		t.Error("no node joined yet (a resumed cast): no room, want room")
	}
}

// The machine's CPU binds a plan where it is among the constraints that
// set its rate.
func TestMachineCPUBinds(t *testing.T) {
	cpu := capacity.Constraint{Kind: capacity.MachineCPULimit, Coef: 1e-8, Cap: 2}
	link := capacity.Constraint{Kind: capacity.LinkLimit, Coef: 1, Cap: 12.5e6}
	tests := []struct {
		name string
		r    capacity.Result
		want bool
	}{
		{"bound by the machine's CPU", capacity.Result{Binding: []capacity.Constraint{cpu}, Constraints: []capacity.Constraint{cpu, link}}, true},
		{"bound by a link", capacity.Result{Binding: []capacity.Constraint{link}, Constraints: []capacity.Constraint{cpu, link}}, false},
		{"no plan", capacity.Result{}, false},
	}
	for _, tt := range tests {
		if got := machineCPUBinds(tt.r); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
