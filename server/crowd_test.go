package server

import (
	"log/slog"
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

// A shared disk is measured in a crowd only where one writer's figure puts
// it within diskDoubt of the plan's rate, and measured twice where it binds.
func TestSharedDiskMayBind(t *testing.T) {
	disk := func(bound float64) capacity.Constraint {
		return capacity.Constraint{Kind: capacity.MachineDiskLimit, Coef: 24, Cap: 24 * bound}
	}
	tests := []struct {
		name        string
		r           capacity.Result
		want, binds bool
	}{
		{"the disk binds", capacity.Result{Rate: 69e6, Constraints: []capacity.Constraint{disk(69e6)}}, true, true},
		{"the disk within 3x", capacity.Result{Rate: 100e6, Constraints: []capacity.Constraint{disk(250e6)}}, true, false},
		{"the disk far above", capacity.Result{Rate: 12e6, Constraints: []capacity.Constraint{disk(80e6)}}, false, false},
		{"no shared disk", capacity.Result{Rate: 12e6, Constraints: []capacity.Constraint{{Kind: capacity.DiskLimit, Coef: 1, Cap: 12e6}}}, false, false},
	}
	for _, tt := range tests {
		if got := sharedDiskMayBind(tt.r); got != tt.want {
			t.Errorf("%s: may bind %v, want %v", tt.name, got, tt.want)
		}
		if got := sharedDiskBinds(tt.r); got != tt.binds {
			t.Errorf("%s: binds %v, want %v", tt.name, got, tt.binds)
		}
	}
}

// What the nodes of a shared disk wrote at once: the rates add up, and
// the machine's busy time counts over the part of their windows all of
// them share, against what they all wrote meanwhile.
func TestCrowdOnDisk(t *testing.T) {
	const ms = int64(time.Millisecond)
	// window is a node's window from and to (in ms on the machine's
	// clock), with the machine's busy time in ms at each end.
	window := func(rate float64, from, to int64, busyFrom, busyTo float64) control.NetResult {
		return control.NetResult{Rate: rate, Bytes: int64(rate * float64(to-from) / 1e3),
			WindowFrom: from * ms, WindowTo: to * ms, BusyFrom: busyFrom / 1e3, BusyTo: busyTo / 1e3}
	}
	tests := []struct {
		name     string
		results  []control.NetResult
		rate     float64
		cpuPerMB float64 // seconds of the machine's CPU per 10^6 bytes
		apart    bool
	}{
		// Shared: 1100-1300 ms, 200 ms; the machine was busy 0.3 s of it
		// (from 10.5 s since boot to 10.8 s), and 1.2 GB/s wrote 240 MB.
		{"three nodes opened apart", []control.NetResult{
			window(300e6, 1000, 1300, 10300, 10800),
			window(600e6, 1100, 1400, 10500, 11000), // the last to open
			window(300e6, 1050, 1350, 10400, 10900),
		}, 1200e6, 0.3 / 240, false},
		{"windows that hardly overlap", []control.NetResult{
			window(300e6, 1000, 1300, 10300, 10800),
			window(300e6, 1250, 1550, 10600, 11000),
		}, 600e6, 0, true},
		{"windows apart", []control.NetResult{
			window(300e6, 1000, 1300, 10300, 10800),
			window(300e6, 1400, 1700, 10900, 11300),
		}, 600e6, 0, true},
		{"a node that could not time the machine", []control.NetResult{
			window(300e6, 1000, 1300, 10300, 10800),
			{Bytes: 100e6, Rate: 300e6},
		}, 600e6, 0, false},
		{"nothing written", []control.NetResult{{CPU: 0.3}}, 0, 0, false},
	}
	for _, tt := range tests {
		d := crowdOnDisk(tt.results)
		if d.rate != tt.rate {
			t.Errorf("%s: %v B/s in all, want %v", tt.name, d.rate, tt.rate)
		}
		if got := d.cpu * 1e6; math.Abs(got-tt.cpuPerMB) > 1e-12 {
			t.Errorf("%s: %v s of CPU per MB, want %v", tt.name, got, tt.cpuPerMB)
		}
		if d.apart != tt.apart {
			t.Errorf("%s: apart %v, want %v", tt.name, d.apart, tt.apart)
		}
	}
}

// A shared disk that binds the plan, or took less from all its nodes at
// once than one writer alone, is measured again, and the better window stands: a stall that
// caught the first does not hold the cast to it, and a disk that seeks
// among its writers takes as little in both.
func TestDoubtedDiskIsMeasuredAgain(t *testing.T) {
	nodes := func(alone float64) []*nodeState {
		// One writer alone: 0.25 ns of CPU a byte.
		return []*nodeState{{name: "a", probe: &capacity.Probe{DiskWriteBytesPerSec: alone, DiskWriteCPUBytesPerSec: 4e9}}, {name: "b"}}
	}
	machines := map[string][]*nodeState{"fast": nodes(1.4e9), "stalled": nodes(1.4e9), "unmeasured": nodes(0),
		"dearer": nodes(1.4e9), "slow moment": nodes(1.4e9), "apart": nodes(1.4e9)}
	found := map[string]diskCrowd{"fast": {rate: 2.5e9}, "stalled": {rate: 1.0e9}, "unmeasured": {rate: 1.0e9},
		"dearer": {rate: 2.5e9, cpu: 2.2 * 0.25e-9}, "slow moment": {rate: 2.5e9, cpu: 5.5 * 0.25e-9},
		"apart": {rate: 2.5e9, apart: true}}
	doubted := doubtedDisks(found, machines, planRests{})
	if got := slices.Sorted(maps.Keys(doubted)); !slices.Equal(got, []string{"slow moment", "stalled"}) {
		t.Fatalf("doubted %q, want the stalled disk and the one that cost the machine 5.5 times a lone writer's CPU", got)
	}
	// Where a machine's CPU binds the plan, a crowd that cost it 2.2
	// times a lone writer's CPU is measured again too, and one whose
	// windows shared too little to time the CPU.
	doubted = doubtedDisks(found, machines, planRests{cpu: true})
	if got := slices.Sorted(maps.Keys(doubted)); !slices.Equal(got, []string{"apart", "dearer", "slow moment", "stalled"}) {
		t.Fatalf("doubted %q where the CPU binds, want the stalled disk, the untimed one and the two dearer than 1.5 times a lone writer", got)
	}
	// A disk that binds the plan rests it on one short window: all are
	// measured again.
	if doubted := doubtedDisks(found, machines, planRests{disk: true}); len(doubted) != len(found) {
		t.Fatalf("doubted %v where a disk binds the plan, want all", slices.Collect(maps.Keys(doubted)))
	}
	tests := []struct {
		name          string
		first, second diskCrowd
		want          diskCrowd
		note          string
	}{
		{"a stall in the first window", diskCrowd{rate: 1.0e9}, diskCrowd{rate: 1.6e9, cpu: 4e-10},
			diskCrowd{rate: 1.6e9, cpu: 4e-10, other: 1.0e9}, "took 1600.0 MB/s in all, which the model shares out among them (the better of two windows: the other took 1000.0)"},
		{"a disk that seeks", diskCrowd{rate: 0.3e9}, diskCrowd{rate: 0.25e9},
			diskCrowd{rate: 0.3e9, other: 0.25e9}, "took 300.0 MB/s in all, which the model shares out among them (the better of two windows: the other took 250.0)"},
		{"a slow moment in the first window's CPU", diskCrowd{rate: 2.5e9, cpu: 1.4e-9}, diskCrowd{rate: 2.4e9, cpu: 0.3e-9},
			diskCrowd{rate: 2.5e9, cpu: 0.3e-9, other: 2.4e9}, "at 0.30 ns of the machine's CPU a byte, 1.2× what one writer measured alone"},
		{"the better window's CPU, the other's unknown", diskCrowd{rate: 2.5e9, cpu: 0.3e-9}, diskCrowd{rate: 2.4e9},
			diskCrowd{rate: 2.5e9, cpu: 0.3e-9, other: 2.4e9}, "at 0.30 ns of the machine's CPU a byte"},
		{"the worse window timed the CPU, the better's windows apart", diskCrowd{rate: 2.5e9, apart: true}, diskCrowd{rate: 2.4e9, cpu: 0.3e-9},
			diskCrowd{rate: 2.5e9, cpu: 0.3e-9, other: 2.4e9}, "at 0.30 ns of the machine's CPU a byte"},
		{"neither timed the CPU", diskCrowd{rate: 2.5e9, apart: true}, diskCrowd{rate: 2.4e9, apart: true},
			diskCrowd{rate: 2.5e9, other: 2.4e9, apart: true}, "too little to time the machine's CPU: the model counts what one writer measured alone"},
	}
	for _, tt := range tests {
		got := betterWindow(tt.first, tt.second)
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
		if note := got.note(machines["stalled"]); !strings.Contains(note, tt.note) {
			t.Errorf("%s: note %q, want it to say %q", tt.name, note, tt.note)
		}
	}
}

// The nodes of a machine that holds more of the cast's hosts than it has
// cores, the source's machine counting the source, are told to keep to
// one core; no other node is told anything.
func TestShareCores(t *testing.T) {
	conn := controlPairs(t)
	probed := func(cores int) *capacity.Probe {
		return &capacity.Probe{Cores: cores, RelayBytesPerSec: 2e9, NetStreamBytesPerSec: 3e9, MemcpyBytesPerSec: 8e9}
	}
	const here = "the source's machine" // stands for its key (sourceMachine)
	for _, tt := range []struct {
		name     string
		machines []string // each node's
		cores    map[string]int
		want     []int // the procs each node is told; 0: told nothing
		wantHere bool  // the source's machine is crowded
	}{
		{"three nodes on two cores", []string{"m1", "m1", "m1"}, map[string]int{"m1": 2}, []int{1, 1, 1}, false},
		{"three nodes on eight cores", []string{"m1", "m1", "m1"}, map[string]int{"m1": 8}, []int{0, 0, 0}, false},
		{"three nodes and the source on three cores", []string{here, here, here}, map[string]int{here: 3}, []int{1, 1, 1}, true},
		{"three nodes and the source on four cores", []string{here, here, here}, map[string]int{here: 4}, []int{0, 0, 0}, false},
		{"three nodes on three cores", []string{"m1", "m1", "m1"}, map[string]int{"m1": 3}, []int{0, 0, 0}, false},
		{"one crowded machine, one not", []string{"m1", "m2", "m1", "m2", "m1"}, map[string]int{"m1": 2, "m2": 4}, []int{1, 0, 1, 0, 1}, false},
		{"one node alone", []string{"m1"}, map[string]int{"m1": 1}, []int{0}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			var ready []*nodeState
			var nodeEnds []*control.Conn
			probes := map[string]bool{}
			for _, m := range tt.machines {
				srv, node := conn()
				n := &nodeState{conn: srv, machine: m}
				if !probes[m] { // the first node of a machine measures it
					probes[m] = true
					n.probe = probed(tt.cores[m])
				}
				ready = append(ready, n)
				nodeEnds = append(nodeEnds, node)
			}
			for _, n := range ready {
				if n.machine == here {
					n.machine = s.sourceMachine(ready)
				}
			}
			s.shareCores(ready)
			if s.crowdedHere != tt.wantHere {
				t.Errorf("the source's machine crowded: %v, want %v", s.crowdedHere, tt.wantHere)
			}
			for i, n := range ready {
				// A ping after it tells "told nothing" from "not yet".
				n.conn.Send(control.Message{Type: control.MsgPing})
				m, err := nodeEnds[i].Recv(5 * time.Second)
				if err != nil {
					t.Fatal(err)
				}
				got := 0
				if m.Type == control.MsgShare {
					got = m.Share.Procs
				}
				if got != tt.want[i] {
					t.Errorf("node %d on %s: told %d procs (%s message), want %d", i, tt.machines[i], got, m.Type, tt.want[i])
				}
			}
		})
	}
}

// A cast whose stream is compressed gives the nodes of a crowded machine
// two threads (at most their cores) before their places; a raw one leaves
// them on one, and nodes that were never kept to one hear nothing.
func TestShareForCast(t *testing.T) {
	conn := controlPairs(t)
	for _, tt := range []struct {
		name  string
		send  imaging.Encoding
		cores int
		nodes int
		wake  time.Duration
		want  int // the procs each node was told last; 0: nothing
		// wantWake is the wake-up delay each node was told last, in ms
		wantWake int
	}{
		{"zstd, three nodes on two cores", imaging.Zstd, 2, 3, 0, 2, 0},
		{"gzip, three nodes on two cores", imaging.Gzip, 2, 3, 0, 2, 0},
		{"raw, three nodes on two cores", imaging.Raw, 2, 3, 0, 1, 0},
		{"zstd, two nodes on one core", imaging.Zstd, 1, 2, 0, 1, 0},
		{"zstd, three nodes on eight cores", imaging.Zstd, 8, 3, 0, 0, 0},
		{"zstd held back by the cores", imaging.Zstd, 2, 3, relay.CrowdedWakeDelay, 2, 12},
		{"raw held back by the cores: one thread stays", imaging.Raw, 2, 3, relay.CrowdedWakeDelay, 1, 12},
		{"eight cores: nobody is told", imaging.Raw, 8, 3, relay.CrowdedWakeDelay, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			var ready []*nodeState
			var nodeEnds []*control.Conn
			for i := range tt.nodes {
				srv, node := conn()
				n := &nodeState{conn: srv, machine: "m1"}
				if i == 0 {
					n.probe = &capacity.Probe{Cores: tt.cores, RelayBytesPerSec: 2e9, NetStreamBytesPerSec: 3e9, MemcpyBytesPerSec: 8e9}
				}
				ready = append(ready, n)
				nodeEnds = append(nodeEnds, node)
			}
			s.shareCores(ready)
			s.shareForCast(tt.send, tt.wake)
			for i, n := range ready {
				n.conn.Send(control.Message{Type: control.MsgPing})
				var got []control.Share
				for {
					m, err := nodeEnds[i].Recv(5 * time.Second)
					if err != nil {
						t.Fatal(err)
					}
					if m.Type != control.MsgShare {
						break
					}
					got = append(got, *m.Share)
				}
				procs, wake := 0, 0
				for _, sh := range got {
					if sh.Procs > 0 {
						procs = sh.Procs
					}
					wake = sh.WakeMillis
				}
				if procs != tt.want || wake != tt.wantWake {
					t.Errorf("node %d: told %+v: %d procs and %d ms last, want %d and %d", i, got, procs, wake, tt.want, tt.wantWake)
				}
			}
		})
	}
}

// The source casts on one thread where its machine is crowded and it
// sends the image as stored; a source that converts the stream, or runs on
// a machine of its own, keeps its threads, and the cast's end puts back
// what was set.
func TestShareSourceCores(t *testing.T) {
	for _, tt := range []struct {
		name    string
		crowded bool
		stored  imaging.Encoding
		send    imaging.Encoding
		want    []int // the settings asked for, in order
	}{
		{"raw as stored, crowded", true, imaging.Raw, imaging.Raw, []int{1, 2}},
		{"zstd as stored, crowded", true, imaging.Zstd, imaging.Zstd, []int{1, 2}},
		{"raw compressed on the fly", true, imaging.Raw, imaging.Zstd, nil},
		{"zstd decoded to raw", true, imaging.Zstd, imaging.Raw, nil},
		{"a machine of its own", false, imaging.Raw, imaging.Raw, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			procs := 2
			var asked []int
			s := &Server{crowdedHere: tt.crowded, img: &imaging.Image{Encoding: tt.stored}, log: slog.New(slog.DiscardHandler),
				cfg: Config{SetProcs: func(n int) int {
					asked = append(asked, n)
					was := procs
					procs = n
					return was
				}}}
			restore := s.shareSourceCores(tt.send)
			if len(tt.want) > 0 && procs != 1 {
				t.Errorf("the source runs on %d threads during the cast, want 1", procs)
			}
			restore()
			if !slices.Equal(asked, tt.want) || procs != 2 {
				t.Errorf("settings asked for %v, ending at %d; want %v, ending at 2", asked, procs, tt.want)
			}
		})
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

// The model takes the CPU a byte that a shared disk's crowd timed for
// every node of its machine where it is dearer than one writer alone, or
// so much cheaper that the one writer's probe was disturbed; else, and
// where the crowd did not time it, the one writer's.
func TestNetworkTakesTheDiskCrowdsCPU(t *testing.T) {
	// A lone writer whose probe caught its disk stalling: 3.6 ns a byte.
	lone := &capacity.Probe{Cores: 2, DiskWriteBytesPerSec: 145e6, DiskWriteCPUBytesPerSec: 279e6, MemcpyBytesPerSec: 25e9}
	for _, tt := range []struct {
		name string
		cpu  float64 // what the crowd timed, s/B; 0: not timed
		want float64 // each node's disk figure in the model, B/s per core
	}{
		{"the crowd far cheaper: the lone probe disturbed", 0.3e-9, 1 / 0.3e-9},
		{"the crowd dearer", 5e-9, 1 / 5e-9},
		{"the crowd a little cheaper", 3e-9, 279e6},
		{"not timed", 0, 279e6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{cfg: Config{Yes: true}, probe: probe.Report{Probe: capacity.Probe{Cores: 2, MemcpyBytesPerSec: 25e9}}}
			ready := onTheSourcesMachine(t, s, lone)
			figs := netFigures{disks: map[string]diskCrowd{ready[0].machine: {rate: 3.27e9, cpu: tt.cpu}}}
			net, _ := s.network(ready, figs)
			for _, h := range nodeHosts(t, net, len(ready)) {
				if got := h.Resources.CPU.Disk; math.Abs(got-tt.want) > 1e-9*tt.want {
					t.Errorf("%s: disk %.4g B/s a core, want %.4g", h.Name, got, tt.want)
				}
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

// What a disk measured in one window only that is past the doubt is set
// aside: the model counts what one writer measured, and the preview says
// so.
func TestUnconfirmedDisk(t *testing.T) {
	lone := 0.25e-9 // one writer alone: 0.25 ns of CPU a byte, 1.4 GB/s
	nodes := []*nodeState{{name: "a", probe: &capacity.Probe{DiskWriteBytesPerSec: 1.4e9, DiskWriteCPUBytesPerSec: 1 / lone}}, {name: "b"}}
	tests := []struct {
		name    string
		rate    float64
		cpu     float64 // times lone
		binding planRests
		// What the model counts: the rate (0: nothing of the crowd), and
		// the CPU a byte counted or set aside, times lone.
		wantRate, wantCPU, wantOnce float64
		note                        string
	}{
		{"a little dearer, the CPU binding", 2.5e9, 1.4, planRests{cpu: true}, 2.5e9, 1.4, 0, ""},
		{"dearer, the CPU binding", 2.5e9, 2.2, planRests{cpu: true}, 2.5e9, 0, 2.2,
			"at 0.55 ns of the machine's CPU a byte, 2.2× what one writer measured alone, timed in one window only: the model counts the latter"},
		{"dearer, a link binding", 2.5e9, 2.2, planRests{}, 2.5e9, 2.2, 0, ""},
		{"far dearer, a link binding", 2.5e9, 5.5, planRests{}, 2.5e9, 0, 5.5,
			"at 1.38 ns of the machine's CPU a byte, 5.5× what one writer measured alone"},
		{"a stall", 110e6, 1, planRests{disk: true}, 0, 0, 0,
			"their disk took 110.0 MB/s in all, less than one writer alone (1400.0 MB/s), in one window the join had no time to measure again: the model counts what one measured alone"},
	}
	for _, tt := range tests {
		found := map[string]diskCrowd{"m": {rate: tt.rate, cpu: tt.cpu * lone}}
		notes := unconfirmed(found, map[string][]*nodeState{"m": nodes}, tt.binding)
		want := diskCrowd{rate: tt.wantRate, cpu: tt.wantCPU * lone, once: tt.wantOnce * lone}
		if got := found["m"]; got != want {
			t.Errorf("%s: the model counts %+v, want %+v", tt.name, got, want)
		}
		if note := notes["m"]; !strings.Contains(note, tt.note) || (tt.note == "") != (note == "") {
			t.Errorf("%s: note %q, want %q", tt.name, note, tt.note)
		}
	}
}

// The preview says which CPU a byte the model counts for a shared disk:
// the crowd's where dearer than one writer's or so much cheaper that the
// writer's probe was disturbed, else the writer's.
func TestDiskCrowdNoteSaysWhichCPUCounts(t *testing.T) {
	lone := 0.25e-9
	nodes := []*nodeState{{name: "a", probe: &capacity.Probe{DiskWriteBytesPerSec: 1.4e9, DiskWriteCPUBytesPerSec: 1 / lone}}, {name: "b"}}
	for _, tt := range []struct {
		times float64 // the crowd's CPU a byte, times lone
		want  string
	}{
		{1.4, "1.4× what one writer measured alone: the model counts the former"},
		{0.8, "0.8× what one writer measured alone: the model counts the latter"},
		{0.1, "0.1× what one writer measured alone: that writer's probe was disturbed, and the model counts the former"},
	} {
		if note := (diskCrowd{rate: 2.5e9, cpu: tt.times * lone}).note(nodes); !strings.Contains(note, tt.want) {
			t.Errorf("%.1f× one writer: note %q, want it to say %q", tt.times, note, tt.want)
		}
	}
}

// A disk measured twice keeps the rate its windows agree on, slow as it
// is; a CPU a byte past the doubt that only one of them timed is set
// aside all the same.
func TestUnconfirmedCPUKeepsTheRate(t *testing.T) {
	lone := 0.25e-9
	nodes := []*nodeState{{name: "a", probe: &capacity.Probe{DiskWriteBytesPerSec: 1.4e9, DiskWriteCPUBytesPerSec: 1 / lone}}, {name: "b"}}
	found := map[string]diskCrowd{"seeks": {rate: 300e6, cpu: 5.5 * lone, other: 280e6}, "not doubted": {rate: 300e6, cpu: 5.5 * lone}}
	notes := unconfirmedCPU(found, map[string][]*nodeState{"seeks": nodes}, planRests{})
	if got, want := found["seeks"], (diskCrowd{rate: 300e6, other: 280e6, once: 5.5 * lone}); got != want {
		t.Errorf("the model counts %+v, want %+v", got, want)
	}
	if got := found["not doubted"]; got.cpu != 5.5*lone {
		t.Errorf("a machine not doubted changed: %+v", got)
	}
	if !strings.Contains(notes["seeks"], "timed in one window only") || len(notes) != 1 {
		t.Errorf("notes %q, want one for the disk set aside", notes)
	}
}
