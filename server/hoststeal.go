package server

import (
	"fmt"

	"dolly/dolly/probe"
)

// A VM's host takes its share of the cores in bursts, and a kernel without
// paravirtual steal accounting charges that time to whatever thread was
// running: a probe's CPU clock counts it as the work's, and so does the
// machine's busy time the network probes read (probe.MachineCPU). A join
// that falls in such a burst makes every CPU figure of the machine dearer
// for a cast the host may leave alone: in fourteen demos on a 2-core VM the
// two furthest above their previews (+21% and +29%) were the two whose
// joins the host took 10% and 11% of, against 0-6%, while their casts lost
// 2% to it. The preview says so where it happened.

// hostStealNoted is the host's share of the cores over the join from which
// the preview notes it: the casts of that VM lost 0-3.4% to it.
const hostStealNoted = 0.05

// joinStealNote says what the VM's host took of this machine's cores over
// the join (cpu: from the last node's join to the plan), where that is
// hostStealNoted or more; "" otherwise.
func joinStealNote(cpu probe.CPUTimes) string {
	total := cpu.Total()
	if total <= 0 {
		return ""
	}
	share := cpu.Steal.Seconds() / total.Seconds()
	if share < hostStealNoted {
		return ""
	}
	return fmt.Sprintf("the VM's host took %.0f%% of this machine's cores while the join's probes ran: they count that time as their work's, so a cast the host leaves more of the cores to runs faster than this preview",
		100*share)
}
