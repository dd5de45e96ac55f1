package server

import (
	"math"
	"strings"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/probe"
)

// The summary says where the join went; parts too short to show at a
// tenth of a second are left out, and the plan has the rest.
func TestJoinPartsString(t *testing.T) {
	tests := []struct {
		name  string
		parts JoinParts
		total time.Duration
		want  string
	}{
		{"a lab on one machine", JoinParts{Probes: 1000 * time.Millisecond, Network: 830 * time.Millisecond, Shared: 700 * time.Millisecond}, 2540 * time.Millisecond,
			"probes 1.0s, network 0.8s, shared machine 0.7s, plan 0.0s"},
		{"one PC per node", JoinParts{Probes: 900 * time.Millisecond, Network: 800 * time.Millisecond}, 1800 * time.Millisecond,
			"probes 0.9s, network 0.8s, plan 0.1s"},
		{"the probing node was ready before the last joined", JoinParts{Probes: 3 * time.Millisecond}, 20 * time.Millisecond,
			"plan 0.0s"},
		{"loopback: no network probe", JoinParts{Probes: 700 * time.Millisecond, Shared: 900 * time.Millisecond}, 1700 * time.Millisecond,
			"probes 0.7s, shared machine 0.9s, plan 0.1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.parts.String(tt.total); got != tt.want {
				t.Errorf("String(%v) = %q, want %q", tt.total, got, tt.want)
			}
		})
	}
}

// The report keeps every part that took any time, in seconds.
func TestJoinPartsInTheReport(t *testing.T) {
	r := NewReport(Summary{JoinPhase: 2 * time.Second, JoinParts: JoinParts{Probes: time.Second, Network: 500 * time.Millisecond}})
	if r.JoinSeconds != 2 || r.JoinParts["probes"] != 1 || r.JoinParts["network"] != 0.5 || len(r.JoinParts) != 2 {
		t.Errorf("report join = %v s, parts %v; want 2 s, probes 1 and network 0.5", r.JoinSeconds, r.JoinParts)
	}
	if r := NewReport(Summary{}); r.JoinParts != nil {
		t.Errorf("a cast that never planned reports join parts %v", r.JoinParts)
	}
}

// The summary says how the machine that nodes shared with dolly-server
// spent the cast; a share of the VM's host shows only where there is one.
func TestMachineUse(t *testing.T) {
	tests := []struct {
		name string
		use  MachineUse
		want string
	}{
		{"a VM", MachineUse{Hosts: 25, Cores: 2, CPU: probe.CPUTimes{Busy: 4200 * time.Millisecond, Steal: 300 * time.Millisecond, Idle: 500 * time.Millisecond}, Processes: 3600 * time.Millisecond},
			"this machine's 2 cores over the cast (the source and 24 nodes on it): 84% busy (the cast's processes 72%, the kernel's threads and other programs 12%), 6% taken by the VM's host, 10% idle or waiting for a disk"},
		{"a node did not report its CPU", MachineUse{Hosts: 25, Cores: 2, CPU: probe.CPUTimes{Busy: 4200 * time.Millisecond, Steal: 300 * time.Millisecond, Idle: 500 * time.Millisecond}},
			"this machine's 2 cores over the cast (the source and 24 nodes on it): 84% busy, 6% taken by the VM's host, 10% idle or waiting for a disk"},
		{"no host to take any", MachineUse{Hosts: 2, Cores: 8, CPU: probe.CPUTimes{Busy: time.Second, Idle: 3 * time.Second}},
			"this machine's 8 cores over the cast (the source and 1 node on it): 25% busy, 75% idle or waiting for a disk"},
		{"the work cost more than the probes said", MachineUse{Hosts: 49, Cores: 2, CPU: probe.CPUTimes{Busy: 13400 * time.Millisecond, Idle: 100 * time.Millisecond}, Processes: 12800 * time.Millisecond, Modeled: 9100 * time.Millisecond},
			"this machine's 2 cores over the cast (the source and 48 nodes on it): 99% busy (the cast's processes 95%, the kernel's threads and other programs 4%), 1% idle or waiting for a disk; busy 13.4 CPU-s, 1.47× the 9.1 the model counted from the probes"},
		{"the model's count, a node's CPU unknown", MachineUse{Hosts: 2, Cores: 8, CPU: probe.CPUTimes{Busy: time.Second, Idle: 3 * time.Second}, Modeled: 1250 * time.Millisecond},
			"this machine's 8 cores over the cast (the source and 1 node on it): 25% busy, 75% idle or waiting for a disk; busy 1.0 CPU-s, 0.80× the 1.2 the model counted from the probes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.use.String(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			r := NewReport(Summary{ThisMachine: &tt.use})
			sh := tt.use.shares()
			if m := r.ThisMachine; m == nil || m.Hosts != tt.use.Hosts || m.Cores != tt.use.Cores || m.Busy != sh.busy || m.Steal != sh.steal || m.Idle != sh.idle {
				t.Errorf("report's machine = %+v, want %d hosts, %d cores, %.2f/%.2f/%.2f", r.ThisMachine, tt.use.Hosts, tt.use.Cores, sh.busy, sh.steal, sh.idle)
			}
			if want := tt.use.Processes.Seconds() / tt.use.CPU.Total().Seconds(); r.ThisMachine != nil && r.ThisMachine.Processes != want {
				t.Errorf("report's processes share = %v, want %v", r.ThisMachine.Processes, want)
			}
			if m := r.ThisMachine; m != nil && (m.BusyCPUSeconds != tt.use.CPU.Busy.Seconds() || m.ProcessCPUSeconds != tt.use.Processes.Seconds() || m.ModelCPUSeconds != tt.use.Modeled.Seconds()) {
				t.Errorf("report's CPU-s = %v busy, %v the processes', %v modeled; want %v, %v and %v", m.BusyCPUSeconds, m.ProcessCPUSeconds, m.ModelCPUSeconds,
					tt.use.CPU.Busy.Seconds(), tt.use.Processes.Seconds(), tt.use.Modeled.Seconds())
			}
		})
	}
	if r := NewReport(Summary{}); r.ThisMachine != nil {
		t.Errorf("a cast without nodes on the server's machine reports %+v", r.ThisMachine)
	}
}

// The model's CPU for the cast's hosts on the source's machine is that
// machine's CPU per byte in the plan times the image: found by the
// source's name, or as the one machine of that many hosts that a
// topology file named; never a guess between two.
func TestModeledCPU(t *testing.T) {
	machine := func(name string, hosts int, nsPerByte float64) capacity.Constraint {
		return capacity.Constraint{Kind: capacity.MachineCPULimit, Subject: name, Streams: hosts, Coef: nsPerByte * 1e-9, Cap: 2}
	}
	plan := func(cs ...capacity.Constraint) Choice {
		return Choice{Modeled: true, Result: capacity.Result{Plan: capacity.Plan{Hosts: []string{"dolly-server", "pc01", "pc02"}}, Constraints: cs}}
	}
	link := capacity.Constraint{Kind: capacity.LinkLimit, Subject: "dolly-server→sw1", Streams: 3, Coef: 1, Cap: 1e8}
	apart := plan(machine("dolly-server", 3, 2))
	apart.Apart = []Apart{{Name: "pc03", From: "pc02"}}
	unmodeled := plan(machine("dolly-server", 3, 2))
	unmodeled.Modeled = false
	tests := []struct {
		name  string
		ch    Choice
		hosts int
		want  time.Duration
	}{
		{"named after the source", plan(link, machine("dolly-server", 3, 2.5)), 3, 2500 * time.Millisecond},
		{"named by a topology file", plan(machine("lab", 3, 4)), 3, 4 * time.Second},
		{"the source's among others", plan(machine("lab", 3, 4), machine("dolly-server", 3, 1)), 3, time.Second},
		{"two machines of that many hosts", plan(machine("lab", 3, 4), machine("lab2", 3, 1)), 3, 0},
		{"another count of hosts", plan(machine("dolly-server", 5, 2)), 3, 0},
		{"no shared machine in the plan", plan(link), 3, 0},
		{"nodes served apart", apart, 3, 0},
		{"the model did not judge", unmodeled, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := modeledCPU(tt.ch, tt.hosts, 1e9); got != tt.want {
				t.Errorf("modeledCPU = %v, want %v", got, tt.want)
			}
		})
	}
}

// The model's CPU count stands beside a cast only when the cast moved the
// whole image along its plan to every node.
func TestRanAsPlanned(t *testing.T) {
	two := []NodeSummary{{Name: "pc01"}, {Name: "pc02"}}
	tests := []struct {
		name string
		sum  Summary
		want bool
	}{
		{"every node verified", Summary{Nodes: two, Verified: 2}, true},
		{"checked, the plan kept", Summary{Nodes: two, Verified: 2, Replans: []Replan{{From: "chain", To: "chain"}}}, true},
		{"re-planned", Summary{Nodes: two, Verified: 2, Replans: []Replan{{From: "star", To: "chain"}}}, false},
		{"resumed", Summary{Nodes: two, Verified: 2, ResumedBytes: 1 << 20}, false},
		{"a node failed", Summary{Nodes: two, Verified: 1}, false},
		{"a node came late", Summary{Nodes: []NodeSummary{{Name: "pc01"}, {Name: "pc02", Late: true, Apart: SourceName}}, Verified: 2}, false},
		{"a node moved off the plan", Summary{Nodes: []NodeSummary{{Name: "pc01"}, {Name: "pc02", Apart: "pc01"}}, Verified: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sum.ranAsPlanned(); got != tt.want {
				t.Errorf("ranAsPlanned = %v, want %v", got, tt.want)
			}
		})
	}
}

// The prediction held against the slowest node's rate is the image over
// the ETA, start-up and the hops' lag included, as that node's time
// includes them; the plan's steady rate only where no ETA was made.
func TestPredictedAgainstMeasured(t *testing.T) {
	const size = 400e6
	chain := func(rate float64, eta time.Duration) Choice {
		return Choice{Modeled: true, Result: capacity.Result{Rate: rate, ETA: eta, Bottleneck: "CPU of machine m",
			Plan: capacity.Plan{Tree: capacity.Chain(2), Hosts: []string{"dolly-server", "pc01", "pc24"}}}}
	}
	done := func(elapsed time.Duration) []NodeSummary {
		return []NodeSummary{{Name: "pc01", Verified: true, Elapsed: elapsed - 300*time.Millisecond}, {Name: "pc24", Verified: true, Elapsed: elapsed}}
	}
	tests := []struct {
		name      string
		sum       Summary
		predicted float64
		line      string
	}{
		{"over the ETA", Summary{Size: size, Plan: chain(200e6, 2500*time.Millisecond), Nodes: done(3200 * time.Millisecond)}, 160e6,
			"predicted 160.0 MB/s (the image over the ETA of 2.5s), measured 125.0 MB/s (the slowest node over its time; -22%)"},
		{"no ETA", Summary{Size: size, Plan: chain(200e6, 0), Nodes: done(4 * time.Second)}, 200e6,
			"predicted 200.0 MB/s (the plan's rate), measured 100.0 MB/s (the slowest node over its time; -50%)"},
		{"not modeled", Summary{Size: size, Plan: Choice{}, Nodes: done(4 * time.Second)}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sum.PredictedRate(); math.Abs(got-tt.predicted) > 1 {
				t.Errorf("PredictedRate() = %.0f, want %.0f", got, tt.predicted)
			}
			got := predictedAgainstMeasured(tt.sum)
			if !strings.HasPrefix(got, tt.line) || (tt.line == "") != (got == "") {
				t.Errorf("predictedAgainstMeasured = %q, want it to start %q", got, tt.line)
			}
			if r := NewReport(tt.sum); tt.line != "" && math.Abs(r.Plan.SlowestPredictedMBps*1e6-tt.predicted) > 1 {
				t.Errorf("report: slowest_predicted_mbps %.2f, want %.2f", r.Plan.SlowestPredictedMBps, tt.predicted/1e6)
			}
		})
	}
}
