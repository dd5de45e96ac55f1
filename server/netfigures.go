package server

import (
	"fmt"
	"math"
	"slices"
	"time"

	"dolly/dolly/control"
)

// netFigures is what the probes measured, per node in bytes per second.
type netFigures struct {
	star   map[string]float64 // each node's share while the source sent to all
	ringIn map[string]float64 // what each node received from the one before it
	ringUp map[string]float64 // what the next node received from it
	// ringCPU is each node's CPU time per byte it received in the ring,
	// while it sent as much: what a stream in and out at its link's pace
	// costs it.
	ringCPU map[string]float64
	// ringMachine is the same for the node's machine: its busy time, all
	// cores and kernel threads, over the bytes all its nodes received in
	// the ring. A shaped link's queue runs its timers and sends in
	// softirqs, which the kernel's threads take, and no process's time
	// shows (12 nodes on tbf-shaped veths: 12.5 ns a byte, the processes'
	// own 10.2).
	ringMachine map[string]float64
	// ringBusy is the share of the time the CPUs of the node's machine
	// were busy in the ring (the median its nodes saw). A ring that kept
	// them busy measured what the CPU let through, which varies from node
	// to node with the scheduler's turns, not their links.
	ringBusy map[string]float64
	// busyShares is, by machine key, the part of the time the machine's
	// CPUs were busy in a ring that kept them busy (see busyShares):
	// capacity.Machine.BusyShare.
	busyShares map[string]float64
	// starSent is what the source carried to all nodes at once per
	// second, over one window after the streams' start (see
	// probe.Window); 0 if unknown.
	starSent float64
	// connect is the longest the source took to connect to a node and
	// open a probe stream to it, all at once: what a cast's hops take to
	// connect before its first byte.
	connect time.Duration
	took    time.Duration
	crowds  map[string]crowd     // by machine key: what a crowded machine's nodes measured at once
	disks   map[string]diskCrowd // by machine key: what a shared disk took from its nodes writing at once
	// decoders is, by machine key, how fast a crowded machine's nodes
	// decoded zstd all at once.
	decoders map[string]decodeCrowd
	// encodeSlowdown is how many times its CPU a byte alone the source's
	// encoder took while its machine's nodes decoded at once (see
	// probe.EncodeCrowd); 0 if not measured.
	encodeSlowdown float64
}

// link is the node's measured link rate: the faster of its two ring
// directions (a slow neighbour holds one of them back, not the node), or
// its star share when there was no ring. 0 when nothing was measured.
func (f netFigures) link(name string) float64 {
	if r := max(f.ringIn[name], f.ringUp[name]); r > 0 {
		return r
	}
	return f.star[name]
}

// sourceLink is what the source sent in all while it sent to every node:
// what the nodes acknowledged in one window, which the sum of what the nodes received,
// each over its own stream's time, overstates when the streams took turns
// on the link (by a fifth or more in a lab of 12 or 24 nodes at 100 Mbit/s).
func (f netFigures) sourceLink() float64 {
	var sum float64
	for _, r := range f.star {
		sum += r
	}
	if f.starSent > 0 && (sum <= 0 || f.starSent < sum) {
		return f.starSent
	}
	return sum
}

// linkCPU is what a stream in and out at the pace of n's link costs n,
// in CPU seconds a byte: its process's time in the ring or, where more, its
// share of its machine's (ringMachine). A crowded machine's figures are
// all raised by what its nodes cost each other (crowd.slowdown), which the
// machine's time holds already. On a machine the ring kept busy (see
// busy) the machine's share stands alone: there the scheduler's turns set
// each node's pace, and a node's stream in came at whatever pace the node
// before it in the ring got, behind a trunk that node's, not its own. In
// the lab of two switches the node after the trunk took 1.8 ns a byte in
// the ring, against the machine's 1.2, and the model counted it at three
// times the others of the chain, whose stream came at their links' pace:
// the prediction fell 13-18% below the casts. 0: not measured.
func (f netFigures) linkCPU(n *nodeState) float64 {
	own := f.ringCPU[n.name]
	if own <= 0 {
		return 0
	}
	machine := f.ringMachine[n.name]
	if c, ok := f.crowds[n.machine]; ok {
		machine /= c.slowdown()
	}
	if f.busy(n) && machine > 0 {
		return machine
	}
	return max(own, machine)
}

// describe says what the probes measured, for the preview.
func (f netFigures) describe(ready []*nodeState) string {
	lo, hi := 0.0, 0.0
	for _, n := range ready {
		r := f.link(n.name)
		if r <= 0 {
			continue
		}
		if lo == 0 || r < lo {
			lo = r
		}
		hi = max(hi, r)
	}
	s := fmt.Sprintf("links measured in %s: the source sent %s MB/s in all to %s at once; each node's link carried %s–%s MB/s each way with all of them sending to the next",
		formatDuration(f.took), mbps(f.sourceLink()), plural(len(ready), "node"), mbps(lo), mbps(hi))
	// Over loopback the ring is no link, and the model leaves its CPU out.
	if cpu, ok := ringMedian(ready, f.ringCPU); ok {
		s += fmt.Sprintf(", at %.1f ns of CPU per byte in and out (the median node)", cpu*1e9)
		if m, ok := ringMedian(ready, f.ringMachine); ok && m > cpu {
			s += fmt.Sprintf(", %.1f ns with the kernel's threads (its machine's busy time)", m*1e9)
		}
	}
	var busy []float64
	for _, n := range ready {
		if f.busy(n) {
			busy = append(busy, f.ringBusy[n.name])
		}
	}
	if len(busy) > 0 {
		s += fmt.Sprintf("; the ring kept the CPUs busy %.0f%% of the time where %s run, so their links carried what the CPU let through: each from %.0f%% of the median up counts as the best of them",
			100*median(busy), plural(len(busy), "node"), 100*(1-busyBand))
	}
	return s
}

// settleBand is how far a node's measured link may lie from the lab's
// median and still count as the same kind of link, measured with noise;
// busyBand is as far on a machine whose CPUs the ring kept busy
// (busyShare or more of the time): there the scheduler's turns decide
// what each link carries, and in a lab on tbf-shaped gigabit veths the
// links of 8 nodes alike carried 21.9-46.0 MB/s, of 16 nodes 7.4-20.6. A
// link a tenth of the others' (10 Mbit/s among 100) still stands out.
const (
	settleBand = 0.25
	busyBand   = 0.75
	busyShare  = 0.9
)

// busy reports whether the ring kept the CPUs of n's machine busy.
func (f netFigures) busy(n *nodeState) bool { return f.ringBusy[n.name] >= busyShare }

// settle gives the median to the ring rates that lie within settleBand of
// it (where the ring was CPU-bound, the best of them to all from busyBand
// below the median up): links of one kind then look
// alike to the planner, which otherwise orders a chain by noise, and only
// a link clearly apart stands out.
func (f netFigures) settle(ready []*nodeState) {
	var rates []float64
	for _, n := range ready {
		if r := f.link(n.name); r > 0 {
			rates = append(rates, r)
		}
	}
	if len(rates) < 2 {
		return
	}
	slices.Sort(rates)
	median := rates[len(rates)/2]
	// Where the ring was busy, links alike carried at least what the
	// best of them did: the others got fewer turns of the CPU.
	var best float64
	for _, n := range ready {
		if r := f.link(n.name); f.busy(n) && r >= (1-busyBand)*median {
			best = max(best, r)
		}
	}
	for _, n := range ready {
		low, high, to := 1-settleBand, 1+settleBand, median
		if f.busy(n) {
			low, high, to = 1-busyBand, math.Inf(1), best
		}
		near := func(r float64) bool { return r > 0 && r >= low*median && r <= high*median }
		if near(f.link(n.name)) {
			if near(f.ringIn[n.name]) || f.ringIn[n.name] > to {
				f.ringIn[n.name] = to
			}
			if near(f.ringUp[n.name]) || f.ringUp[n.name] > to {
				f.ringUp[n.name] = to
			}
		}
	}
}

// machineRing is, for each node, its machine's busy time per byte its
// nodes received in the ring (results[i] is what ready[i] received): the
// median of what its nodes saw the machine spend over their probes, which
// ran at the same time, over all they received; and the share of the time
// the machine's CPUs were busy (the median its nodes saw). Its cost is
// left out unless every node of it reported what it received, and enough
// in all; its busy share is left out only if none of them saw the
// machine's time.
func machineRing(ready []*nodeState, results []control.NetResult) (cost, busy map[string]float64) {
	type machine struct {
		busy, share []float64
		bytes       int64
		ok          bool // every node reported its bytes
	}
	by := map[string]*machine{}
	key := func(n *nodeState) string {
		if n.machine == "" {
			return "node " + n.name // a machine of its own, as far as anyone knows
		}
		return n.machine
	}
	for i, n := range ready {
		m := by[key(n)]
		if m == nil {
			m = &machine{ok: true}
			by[key(n)] = m
		}
		r := results[i]
		if r.Error != "" || r.Bytes <= 0 {
			m.ok = false
			continue
		}
		m.bytes += r.Bytes
		if r.MachineCPU > 0 {
			m.busy = append(m.busy, r.MachineCPU)
			m.share = append(m.share, r.MachineCPU/(r.MachineCPU+r.MachineIdle))
		}
	}
	cost, busy = map[string]float64{}, map[string]float64{}
	for _, n := range ready {
		m := by[key(n)]
		if len(m.busy) == 0 {
			continue
		}
		busy[n.name] = median(m.share)
		if m.ok && m.bytes >= ringCPUBytes {
			cost[n.name] = median(m.busy) / float64(m.bytes)
		}
	}
	return cost, busy
}

// ringMedian is the median of a ring figure over the nodes off loopback
// that have it; false if none has.
func ringMedian(ready []*nodeState, fig map[string]float64) (float64, bool) {
	var xs []float64
	for _, n := range ready {
		if c := fig[n.name]; c > 0 && !n.loopback() {
			xs = append(xs, c)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// median is the middle of xs (the upper one of an even count); xs stays
// as it was.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
