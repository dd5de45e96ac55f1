package main

import (
	"fmt"
	"strings"
)

// scenarioTables writes the tables of the labs that are not the matrix:
// a slow node, two switches, a late node.
func scenarioTables(b *strings.Builder, results []result) {
	if rows := filterResults(results, func(r result) bool { return r.slowMbit > 0 }); len(rows) > 0 {
		r0 := rows[0]
		scenarioTable(b, fmt.Sprintf("A slow node: %d nodes at %v Mbit/s, and one more at %v Mbit/s (%s image)", r0.nodes, r0.mbit, r0.slowMbit, imageLabel(r0.image)),
			"MB/s per node (slowest)", "slow node MB/s (of stream on its link)", rows, func(r result) string {
				if !r.slow {
					return "not in the cast"
				}
				return cell(r, fmt.Sprintf("%.2f (%.2f)", r.slowMeasured, r.slowWire))
			})
	}
	if rows := filterResults(results, func(r result) bool { return r.trunkMbit > 0 }); len(rows) > 0 {
		r0 := rows[0]
		scenarioTable(b, fmt.Sprintf("Two switches: %d nodes at %v Mbit/s on the source's switch, %d behind a %v Mbit/s trunk (%s image, topology file)", r0.nodes/2, r0.mbit, r0.nodes/2, r0.trunkMbit, imageLabel(r0.image)),
			"source's switch MB/s per node", "far switch MB/s (of stream)", rows, func(r result) string {
				return cell(r, fmt.Sprintf("%.2f (%.2f)", r.farMeasured, r.farWire))
			})
	}
	if rows := filterResults(results, func(r result) bool { return r.mbit == 0 }); len(rows) > 0 {
		r0 := rows[0]
		scenarioTable(b, fmt.Sprintf("Unshaped links: a chain of %d on veth pairs without tc, as fast as this machine lets it run (%s image)", r0.nodes, imageLabel(r0.image)),
			"MB/s per node (slowest)", "node CPU s per GB of image (stream only; the machine's cores busy)", rows, func(r result) string {
				gb := float64(imageSpecs[r.image].Size) / 1e9
				return cell(r, fmt.Sprintf("%.2f (%.1f of %d busy)", r.streamCPU/float64(r.nodes)/gb, r.busy, r.cores))
			})
	}
	for _, img := range dirtyImages {
		rows := filterResults(results, func(r result) bool { return r.image == img })
		if len(rows) == 0 {
			continue
		}
		r0 := rows[0]
		scenarioTable(b, fmt.Sprintf("A used disk's image: %d nodes at %v Mbit/s (%s%s)", r0.nodes, r0.mbit, imageLabel(r0.image), junkNote(imageSpecs[r0.image])),
			"MB/s per node (slowest)", "stream MB sent (of the MB in use)", rows, func(r result) string {
				return cell(r, fmt.Sprintf("%.1f (%.1f)", float64(r.streamBytes)/1e6, float64(r.imageUsed)/1e6))
			})
	}
	if rows := filterResults(results, func(r result) bool { return r.late || r.lateBase }); len(rows) > 0 {
		r0 := rows[0]
		scenarioTable(b, fmt.Sprintf("A late node: %d nodes at %v Mbit/s, and one more started %v into the cast (%s image)", r0.nodes, r0.mbit, lateAfter, imageLabel(r0.image)),
			"MB/s per node (slowest)", "late node MB/s (from its start)", rows, func(r result) string {
				if !r.late {
					return "not in the cast"
				}
				return cell(r, fmt.Sprintf("%.2f, verified", r.lateMeasured))
			})
	}
}

// scenarioTable writes one table: a row per run, with the measured rate
// under rateHead and what extra says under extraHead.
func scenarioTable(b *strings.Builder, title, rateHead, extraHead string, rows []result, extra func(result) string) {
	fmt.Fprintf(b, "## %s\n\n", title)
	fmt.Fprintf(b, "| run | plan | time | %s | predicted MB/s | error | %s | casts MB/s (predicted) |\n|---|---|---|---|---|---|---|---|\n", rateHead, extraHead)
	for _, r := range rows {
		pred, errPct := "", ""
		if r.predicted > 0 && r.err == "" {
			pred, errPct = fmt.Sprintf("%.2f", r.predicted), fmt.Sprintf("%+.1f%%", r.errorPercent())
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", strings.Join(strings.Fields(r.runSpec.String()), " "), r.chosen,
			cell(r, fmt.Sprintf("%.1f s", r.seconds)), cell(r, fmt.Sprintf("%.2f", r.measured)), pred, errPct, extra(r), castsCell(r))
	}
	b.WriteString("\n")
}
