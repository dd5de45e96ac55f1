package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The checks state the bench's goals (the acceptance criteria of the lab's
// issues) and whether a run met them.

// labRate is the rate by which plans of a run's group compare: what the
// admin waits for, the lab's slowest node. Behind a thin trunk that is a
// node of the far switch, whose rate the plan decides (a compressed
// stream crosses the trunk faster); a slow node's own link bounds it in
// every plan, so there the others' rate is what tells plans apart.
func (r result) labRate() float64 {
	if r.trunkMbit > 0 && r.farMeasured > 0 {
		return min(r.measured, r.farMeasured)
	}
	return r.measured
}

// joinGoal is the most the join phase may take: from the last node
// joining to the plan, probes and the image's profile included.
const joinGoal = 3.0

// joinPhase states the join phase of every dolly cast of the largest lab
// in the results: the longest, and the median.
func joinPhase(results []result) (string, bool) {
	most := 0
	for _, r := range results {
		if r.method == "dolly" && r.err == "" && len(r.joins) > 0 {
			most = max(most, r.nodes)
		}
	}
	type join struct {
		seconds float64
		parts   map[string]float64
	}
	var joins []join
	for _, r := range results {
		if r.method == "dolly" && r.err == "" && r.nodes == most {
			for i, s := range r.joins {
				j := join{seconds: s}
				if i < len(r.joinParts) {
					j.parts = r.joinParts[i]
				}
				joins = append(joins, j)
			}
		}
	}
	if len(joins) == 0 {
		return "", false
	}
	slices.SortStableFunc(joins, func(a, b join) int { return cmp.Compare(a.seconds, b.seconds) })
	worst, median := joins[len(joins)-1], joins[(len(joins)-1)/2]
	line := fmt.Sprintf("%s join phase at %d nodes: at most %.1f s over %d casts, median %.1f s (goal: %.0f s)",
		verdict(worst.seconds <= joinGoal), most, worst.seconds, len(joins), median.seconds, joinGoal)
	if len(worst.parts) > 0 {
		// Where the longest went: the node's probe, the network's, the
		// crowd probes of the one machine all nodes share.
		var parts []string
		for _, name := range []string{"probes", "network", "shared"} {
			if s, ok := worst.parts[name]; ok {
				parts = append(parts, fmt.Sprintf("%s %.2f s", name, s))
			}
		}
		line += "; the longest: " + strings.Join(parts, ", ")
	}
	return line, true
}

// verdict says whether a goal was met.
func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// acceptance states the benchmark's goals and whether this run met them.
func acceptance(results []result) []string {
	var out []string
	worst, worstRun := 0.0, ""
	for _, r := range results {
		if r.method == "dolly" && r.err == "" && r.predicted > 0 && math.Abs(r.errorPercent()) > math.Abs(worst) {
			worst, worstRun = r.errorPercent(), r.runSpec.String()
		}
	}
	out = append(out, fmt.Sprintf("%s prediction within 15%% for every dolly run: worst %+.1f%% (%s)", verdict(math.Abs(worst) <= 15), worst, worstRun))
	if line, ok := joinPhase(results); ok {
		out = append(out, line)
	}
	// -auto against the forced plans of its group: the same node count,
	// link speed and image, sent raw (-compress no), as the model could
	// have chosen each of them.
	for _, a := range filterResults(results, func(r result) bool { return r.method == "dolly" && r.topology == "auto" && r.err == "" }) {
		forced := filterResults(results, func(r result) bool {
			return r.method == "dolly" && r.topology != "auto" && r.compression == "none" && r.nodes == a.nodes && r.mbit == a.mbit && r.image == a.image &&
				r.slowMbit == a.slowMbit && r.slow == a.slow && r.trunkMbit == a.trunkMbit && r.late == a.late && r.lateBase == a.lateBase && r.err == ""
		})
		if len(forced) == 0 {
			continue
		}
		best := slices.MaxFunc(forced, func(x, y result) int { return cmp.Compare(x.labRate(), y.labRate()) })
		what := "per node"
		if a.trunkMbit > 0 {
			what = "for the whole lab (its slowest node, on either switch)"
		}
		out = append(out, fmt.Sprintf("%s -auto (%s) %.2f MB/s %s, %.1f%% of the best forced plan (%s %.2f) at %d nodes, %v Mbit/s, %s image (goal: 95%%)",
			verdict(a.labRate() >= 0.95*best.labRate()), a.chosen, a.labRate(), what, 100*a.labRate()/best.labRate(), shapeName(best.runSpec), best.labRate(), a.nodes, a.mbit, a.image))
	}
	// A slow node: the others keep their rate without it, measured in the
	// same bench, and it gets its own link's.
	for _, w := range filterResults(results, func(r result) bool { return r.slow && r.err == "" }) {
		base := filterResults(results, func(r result) bool {
			return r.slowMbit == w.slowMbit && !r.slow && r.topology == w.topology && r.compression == w.compression && r.nodes == w.nodes && r.image == w.image && r.err == ""
		})
		if len(base) == 0 {
			continue
		}
		keep := w.measured / base[0].measured
		out = append(out, fmt.Sprintf("%s with a node at %v Mbit/s, %s keeps %.1f%% of the %d nodes' rate without it (%.2f of %.2f MB/s; goal: 95%%)",
			verdict(keep >= 0.95), w.slowMbit, shapeName(w.runSpec), 100*keep, w.nodes, w.measured, base[0].measured))
		// Its link carries the stream (compressed, without zero runs), so
		// the stream's bytes over its time are what it made of the link.
		link := w.slowMbit / 8
		out = append(out, fmt.Sprintf("%s with %s, the node at %v Mbit/s takes the stream at %.2f MB/s, %.1f%% of its link's %.2f (goal: 90%%)",
			verdict(w.slowWire >= 0.9*link), shapeName(w.runSpec), w.slowMbit, w.slowWire, 100*w.slowWire/link, link))
	}
	// Two switches: the source's side at a single switch's rate (the
	// gigabit matrix's run of as many nodes), the far side at the trunk's.
	for _, w := range filterResults(results, func(r result) bool { return r.trunkMbit > 0 && r.err == "" }) {
		base := filterResults(results, func(r result) bool {
			return r.trunkMbit == 0 && r.slowMbit == 0 && !r.late && !r.lateBase && !r.headline && r.method == w.method &&
				r.topology == w.topology && r.compression == w.compression && r.nodes == w.nodes/2 && r.mbit == w.mbit && r.image == w.image && r.err == ""
		})
		if len(base) > 0 {
			keep := w.measured / base[0].measured
			out = append(out, fmt.Sprintf("%s two switches, %s: the source's side keeps %.1f%% of a single switch's rate (%.2f of %.2f MB/s; goal: 90%%)",
				verdict(keep >= 0.9), shapeName(w.runSpec), 100*keep, w.measured, base[0].measured))
		}
		trunk := w.trunkMbit / 8
		out = append(out, fmt.Sprintf("%s two switches, %s: the far side takes the stream at %.2f MB/s, %.1f%% of the trunk's %.2f (goal: 90%%)",
			verdict(w.farWire >= 0.9*trunk), shapeName(w.runSpec), w.farWire, 100*w.farWire/trunk, trunk))
	}
	// A used disk's image: through its block map the free space is not
	// sent; -zero-free sends it.
	for _, w := range filterResults(results, func(r result) bool { return dirtyImage(r.image) && !r.allBlocks && r.method == "dolly" && r.err == "" }) {
		all := filterResults(results, func(r result) bool {
			return r.image == w.image && r.allBlocks && r.topology == w.topology && r.nodes == w.nodes && r.mbit == w.mbit && r.err == ""
		})
		if len(all) == 0 {
			continue
		}
		ratio := w.measured / all[0].measured
		fs := fsName(w.image)
		out = append(out, fmt.Sprintf("%s used disk's image (%s), %s: %.2f MB/s per node through its block map, %.1f× the %.2f of -zero-free (goal: 3×)",
			verdict(ratio >= 3), fs, shapeName(w.runSpec), w.measured, ratio, all[0].measured))
		out = append(out, fmt.Sprintf("%s used disk's image (%s), %s: %.1f MB sent for %.1f MB in use, %.2f× (goal: at most 1.1×)",
			verdict(float64(w.streamBytes) <= 1.1*float64(w.imageUsed)), fs, shapeName(w.runSpec), float64(w.streamBytes)/1e6, float64(w.imageUsed)/1e6, float64(w.streamBytes)/float64(max(w.imageUsed, 1))))
	}
	// A late node: verified in the same cast (a run fails otherwise), and
	// the others keep their rate.
	for _, w := range filterResults(results, func(r result) bool { return r.late && r.err == "" }) {
		base := filterResults(results, func(r result) bool {
			return r.lateBase && r.topology == w.topology && r.nodes == w.nodes && r.image == w.image && r.err == ""
		})
		if len(base) == 0 {
			continue
		}
		keep := w.measured / base[0].measured
		out = append(out, fmt.Sprintf("%s with a node started %v into the cast (verified, %.2f MB/s from its start), the %d others keep %.1f%% of their rate without it (%.2f of %.2f MB/s; goal: 95%%)",
			verdict(keep >= 0.95), lateAfter, w.lateMeasured, w.nodes, 100*keep, w.measured, base[0].measured))
	}
	// The chain's rate against its own with one node, on the same image:
	// the start-up and the pipeline's fill weigh less on a larger one.
	for _, mbit := range []float64{100, 1000} {
		for _, img := range []string{"small", "large"} {
			if line, ok := chainKeeps(results, "none", mbit, img, 1, 0.95); ok {
				out = append(out, line)
			}
		}
	}
	// The zstd chain's rate as the lab grows, on the same image: every
	// node decodes, so on a shared machine each node's CPU weighs.
	for _, img := range []string{"small", "large"} {
		if line, ok := chainKeeps(results, "zstd", 100, img, 8, 0.90); ok {
			out = append(out, line)
		}
	}
	for _, peer := range []string{"udpcast", "nc-chain"} {
		for _, p := range filterResults(results, func(r result) bool { return r.method == peer && r.err == "" }) {
			for _, d := range filterResults(results, func(r result) bool {
				return r.method == "dolly" && r.topology == "chain" && r.compression == "none" && r.nodes == p.nodes && r.mbit == p.mbit && r.headline == p.headline && r.slowMbit == 0 && !r.late && !r.lateBase && r.trunkMbit == 0 && r.err == ""
			}) {
				images := p.image + " image"
				if d.image != p.image {
					images = fmt.Sprintf("%s image (%s on the %s one)", d.image, peer, p.image)
				}
				out = append(out, fmt.Sprintf("%s dolly chain %.2f MB/s per node against %s %.2f at %d nodes, %v Mbit/s, %s",
					verdict(d.measured >= p.measured), d.measured, peer, p.measured, p.nodes, p.mbit, images))
			}
		}
	}
	return out
}

// chainKeeps holds the longest chain of a compression against the shortest
// of at least minNodes, on one image and link speed: the share of its rate
// per node that it keeps, against goal.
func chainKeeps(results []result, comp string, mbit float64, img string, minNodes int, goal float64) (string, bool) {
	chains := filterResults(results, func(r result) bool {
		return r.method == "dolly" && r.topology == "chain" && r.compression == comp && r.mbit == mbit && r.image == img &&
			r.slowMbit == 0 && !r.late && !r.lateBase && r.trunkMbit == 0 && r.err == "" && r.nodes >= minNodes
	})
	if len(chains) < 2 {
		return "", false
	}
	slices.SortFunc(chains, func(a, b result) int { return a.nodes - b.nodes })
	few, most := chains[0], chains[len(chains)-1]
	if few.nodes == most.nodes {
		return "", false
	}
	name := "raw"
	if comp != "none" {
		name = comp
	}
	ratio := most.measured / few.measured
	return fmt.Sprintf("%s %s chain at %d nodes keeps %.1f%% of its %d-node rate at %v Mbit/s, %s image (goal: %.0f%%)",
		verdict(ratio >= goal), name, most.nodes, ratio*100, few.nodes, mbit, img, goal*100), true
}
