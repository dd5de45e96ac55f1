package server

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/dolly/probe"
)

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
