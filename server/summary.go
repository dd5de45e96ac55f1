package server

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"dolly/capacity"
	"dolly/dolly/probe"
	"dolly/imaging"
	"dolly/internal/units"
)

// Summary is the outcome of a cast.
type Summary struct {
	Image  string
	Size   int64
	Digest imaging.Digest
	Plan   Choice // what ran and what the model predicted of it
	Nodes  []NodeSummary
	// Started says the cast began streaming: nodes may have written to
	// their targets. A cast that never started changed nothing.
	Started bool
	Elapsed time.Duration
	// JoinPhase is from the last node joining to the plan: the nodes'
	// probes, the network's, the model (not the admin's confirmation);
	// JoinParts says where it went.
	JoinPhase time.Duration
	JoinParts JoinParts
	// Replans are the checks of a cast that ran below its prediction.
	Replans  []Replan
	Verified int
	// StreamBytes is the length of the stream the source encoded;
	// ResumedBytes how much of it every node had already when a restarted
	// server took the cast up, and was not sent again.
	StreamBytes  int64
	ResumedBytes int64
	// ThisMachine is how the CPUs of dolly-server's machine spent the
	// cast, when nodes ran on it too; nil otherwise.
	ThisMachine *MachineUse
}

// MachineUse is how a machine's CPUs spent a cast whose hosts shared it
// (the demo, an emulated lab, VMs on one host). The model counts every
// core as the cast's; what the cast could not use of them (the VM's host
// took it, or it stayed idle while the hosts waited on each other or on
// a disk) is why a plan bound by that CPU runs below its prediction.
type MachineUse struct {
	Hosts int // the source and the nodes on the machine
	Cores int
	CPU   probe.CPUTimes
	// Processes is the CPU time the cast's processes on the machine
	// reported (dolly-server's and its nodes'); 0 when some did not.
	Processes time.Duration
	// Modeled is the CPU time the model counted for the cast on the
	// machine: its CPU per byte in the plan, from what the probes measured
	// (the kernel threads' work for the writes included), times the image;
	// 0 when the plan did not count it (see modeledCPU).
	Modeled time.Duration
}

// cpuShares are the parts of a machine's CPU time: busy (of which own, the
// cast's processes'; 0 if unknown), stolen and idle.
type cpuShares struct{ busy, own, steal, idle float64 }

// shares returns the parts of the CPUs' time over the cast.
func (m MachineUse) shares() cpuShares {
	total := m.CPU.Total().Seconds()
	if total <= 0 {
		return cpuShares{}
	}
	busy := m.CPU.Busy.Seconds() / total
	return cpuShares{busy: busy, own: min(m.Processes.Seconds()/total, busy),
		steal: m.CPU.Steal.Seconds() / total, idle: m.CPU.Idle.Seconds() / total}
}

// String says how the machine's CPUs spent the cast.
func (m MachineUse) String() string {
	sh := m.shares()
	parts := []string{fmt.Sprintf("%.0f%% busy", 100*sh.busy)}
	if sh.own > 0 {
		parts[0] += fmt.Sprintf(" (the cast's processes %.0f%%, the kernel's threads and other programs %.0f%%)", 100*sh.own, 100*(sh.busy-sh.own))
	}
	if sh.steal >= 0.005 {
		parts = append(parts, fmt.Sprintf("%.0f%% taken by the VM's host", 100*sh.steal))
	}
	parts = append(parts, fmt.Sprintf("%.0f%% idle or waiting for a disk", 100*sh.idle))
	line := fmt.Sprintf("this machine's %s over the cast (the source and %s on it): %s",
		plural(m.Cores, "core"), plural(m.Hosts-1, "node"), strings.Join(parts, ", "))
	// A plan bound by this CPU misses by two factors: the work cost more
	// (or less) than the probes said, and the cores were not all busy.
	// The busy time, not the processes', is set against the model's: the
	// kernel's threads work for the cast too (a loop device's writes, the
	// network's deferred receives), and the model counts what it measured
	// of them.
	if m.Modeled > 0 && m.CPU.Busy > 0 {
		line += fmt.Sprintf("; busy %.1f CPU-s, %.2f× the %.1f the model counted from the probes",
			m.CPU.Busy.Seconds(), m.CPU.Busy.Seconds()/m.Modeled.Seconds(), m.Modeled.Seconds())
	}
	return line
}

// ranAsPlanned says whether the cast moved the whole image along the plan
// it started with, to every node: only then is the model's CPU for the
// plan what the cast should have cost. A resumed cast sends part of the
// stream, a re-planned one ran another plan, a node that failed did less
// than its share, and one that came late or was moved off the plan ran
// beside it.
func (sum Summary) ranAsPlanned() bool {
	if sum.ResumedBytes > 0 || sum.Verified != len(sum.Nodes) {
		return false
	}
	for _, n := range sum.Nodes {
		if n.Late || n.Apart != "" {
			return false
		}
	}
	for _, rp := range sum.Replans {
		if rp.From != rp.To {
			return false
		}
	}
	return true
}

// modeledCPU is the CPU time the model counted for the hosts of ch's plan
// that share the source's machine (hosts of them, the source included):
// that machine's CPU per byte times the image. It is 0 when the plan did
// not share out a machine of that many hosts, or left nodes out (their
// streams run beside the plan's, on figures of their own).
func modeledCPU(ch Choice, hosts int, size int64) time.Duration {
	if !ch.Modeled || len(ch.Apart) > 0 || size <= 0 || len(ch.Result.Plan.Hosts) == 0 {
		return 0
	}
	// The source's machine is named after the source, unless a topology
	// file named it: then it is the one machine of that many hosts.
	var found []capacity.Constraint
	for _, c := range ch.Result.Constraints {
		if c.Kind != capacity.MachineCPULimit || c.Streams != hosts {
			continue
		}
		if c.Subject == ch.Result.Plan.Hosts[0] {
			found = []capacity.Constraint{c}
			break
		}
		found = append(found, c)
	}
	if len(found) != 1 || found[0].Coef <= 0 {
		return 0
	}
	return time.Duration(found[0].Coef * float64(size) * float64(time.Second))
}

// JoinParts is where the join phase went.
type JoinParts struct {
	// Probes is from the last node joining until every node was ready
	// (or, without -nodes, the admin started the cast): the probe of the
	// node that measures each machine, when it joined last.
	Probes time.Duration
	// Network is the bandwidth probes'; Shared the crowd probes' of the
	// machines that nodes share (see measureShared), which one PC per node
	// never pays.
	Network, Shared time.Duration
}

// String lists the parts that took any time, and the plan's (the rest).
func (p JoinParts) String(total time.Duration) string {
	var parts []string
	rest := total
	for _, part := range []struct {
		name string
		d    time.Duration
	}{{"probes", p.Probes}, {"network", p.Network}, {"shared machine", p.Shared}} {
		rest -= part.d
		if part.d >= 50*time.Millisecond { // shown to a tenth of a second
			parts = append(parts, part.name+" "+formatDuration(part.d))
		}
	}
	return strings.Join(append(parts, "plan "+formatDuration(max(rest, 0))), ", ")
}

// NodeSummary is one node's outcome.
type NodeSummary struct {
	Name     string
	Target   string
	Status   string
	Reason   string
	Elapsed  time.Duration
	Verified bool
	// Predicted is the model's rate for the node, raw image bytes per
	// second (0: no prediction); Apart names the node that served it when
	// the plan served it apart.
	Predicted float64
	Apart     string
	Late      bool // it joined after the plan was made
}

// ErrNotAllVerified means the cast ended with at least one node not verified.
var ErrNotAllVerified = errors.New("not every node was verified")

// summary fills in sum's nodes from their states.
func (s *Server) summary(sum Summary) Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum.Nodes = nil
	sum.Verified = 0
	ns := append([]*nodeState(nil), s.nodes...)
	sortNodes(ns)
	for _, n := range ns {
		ns := NodeSummary{Name: n.name, Target: n.target, Status: n.status.String(), Reason: n.reason, Verified: n.verdict == verified}
		if !n.start.IsZero() && !n.end.IsZero() {
			ns.Elapsed = n.end.Sub(n.start)
		}
		if n.verdict == verified {
			sum.Verified++
		}
		if sum.Plan.Modeled {
			ns.Predicted = sum.Plan.Result.Rate
		}
		for _, a := range sum.Plan.Apart {
			if a.Name == n.name {
				ns.Predicted, ns.Apart = a.Rate, a.From
			}
		}
		if from, ok := s.movedApart[n.name]; ok {
			ns.Apart, ns.Predicted = from, 0
		}
		if n.late {
			ns.Late, ns.Apart, ns.Predicted = true, SourceName, 0
		}
		sum.Nodes = append(sum.Nodes, ns)
	}
	return sum
}

// printSummary shows the outcome per node.
func (s *Server) printSummary(sum Summary) {
	out := s.cfg.Out
	fmt.Fprintf(out, "\nsummary: %s (%s), source digest %s: %d of %d nodes verified in %s\n",
		sum.Image, units.FormatBytes(sum.Size), shortDigest(sum.Digest), sum.Verified, len(sum.Nodes), formatDuration(sum.Elapsed))
	nameW, targetW := len("node"), len("target")
	for _, n := range sum.Nodes {
		nameW, targetW = max(nameW, len(n.Name)), max(targetW, len(n.Target))
	}
	row := func(name, target, t, rate, predicted, result string) {
		fmt.Fprintf(out, "  %-*s  %-*s  %8s %8s %9s  %s\n", nameW, name, targetW, target, t, rate, predicted, result)
	}
	row("node", "target", "time", "MB/s", "predicted", "result")
	for _, n := range sum.Nodes {
		result := "OK (digest verified)"
		if !n.Verified {
			result = strings.ToUpper(n.Status)
			if n.Elapsed > 0 {
				// When it failed, counted from the start of the cast.
				result += " after " + formatDuration(n.Elapsed)
			}
			if n.Reason != "" {
				result += ": " + n.Reason
			}
		}
		switch {
		case n.Late:
			result += ", joined late: served apart by " + n.Apart
		case n.Apart != "":
			result += ", served apart by " + n.Apart
		}
		t, rate, predicted := "—", "—", "—"
		if n.Elapsed > 0 && n.Verified {
			t = formatDuration(n.Elapsed)
			rate = mbps(float64(sum.Size) / n.Elapsed.Seconds())
		}
		if n.Predicted > 0 && n.Predicted < 1e15 {
			predicted = mbps(n.Predicted)
		}
		row(n.Name, n.Target, t, rate, predicted, result)
	}
	for _, rp := range sum.Replans {
		fmt.Fprintf(out, "  %s\n", rp.Message)
	}
	if line := predictedAgainstMeasured(sum); line != "" {
		fmt.Fprintln(out, line)
	}
	if m := sum.ThisMachine; m != nil && m.CPU.Total() > 0 {
		fmt.Fprintln(out, m)
	}
}

// MeasuredRate is the cast's rate as the lab saw it: the image over the
// time the slowest verified node of the plan took (nodes served apart run
// at their own pace); 0 when none was verified.
func (sum Summary) MeasuredRate() float64 {
	var slowest time.Duration
	for _, n := range sum.Nodes {
		if n.Verified && n.Apart == "" && n.Elapsed > slowest {
			slowest = n.Elapsed
		}
	}
	if slowest <= 0 {
		return 0
	}
	return float64(sum.Size) / slowest.Seconds()
}

// PredictedRate is the model's prediction for what MeasuredRate measures:
// the image over the plan's ETA, which counts the start-up and the lag of
// the hops down to the deepest node beside the plan's steady rate (a
// chain of 24 holds its last node some tenths of a second behind its
// first); the steady rate where the ETA is unknown.
func (sum Summary) PredictedRate() float64 {
	r := sum.Plan.Result
	if sum.Size > 0 && r.ETA > 0 && r.ETA < time.Duration(math.MaxInt64) {
		return float64(sum.Size) / r.ETA.Seconds()
	}
	return r.Rate
}

// predictedAgainstMeasured sets the model's prediction beside the cast's
// measured rate and says what bound the plan.
func predictedAgainstMeasured(sum Summary) string {
	got, want := sum.MeasuredRate(), sum.PredictedRate()
	if !sum.Plan.Modeled || sum.Plan.Result.Rate <= 0 || want <= 0 || got <= 0 {
		return ""
	}
	over := "the plan's rate"
	if want != sum.Plan.Result.Rate {
		over = "the image over the ETA of " + formatDuration(sum.Plan.Result.ETA)
	}
	return fmt.Sprintf("predicted %s MB/s (%s), measured %s MB/s (the slowest node over its time; %+.0f%%); the model's bottleneck: %s; joining took %s (%s)",
		mbps(want), over, mbps(got), 100*(got/want-1), sum.Plan.Result.Bottleneck, formatDuration(sum.JoinPhase), sum.JoinParts.String(sum.JoinPhase))
}

func shortDigest(d imaging.Digest) string {
	if d.IsZero() {
		return "(none)"
	}
	return d.Short()
}
