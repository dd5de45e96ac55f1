package server

import (
	"fmt"
	"slices"

	"dolly/capacity"
)

// writeBack models the page cache in front of targets that are files. A
// machine's cache takes in up to its dirty limit (C) at memory speed; only
// the rest of what its nodes write (W) waits for the disk, which drains the
// cache all along. A cast then takes at least (W-C)/disk: the disk limits
// it as if it ran W/(W-C) times faster, and not at all when W ≤ C. (A PC
// writing its block device with O_DIRECT has no such cache.)
//
// probes[i+1] and machineOf[i+1] belong to ready[i]; written is what one
// node writes (the image's bytes outside zero runs). It adjusts the disk
// figures of the nodes that write files and returns a note per machine.
func writeBack(probes []capacity.Probe, machineOf []string, ready []*nodeState, written int64) []string {
	if written <= 0 {
		return nil
	}
	var order []string
	writers := map[string][]int{}
	room := map[string]float64{}
	for i, n := range ready {
		m := machineOf[i+1]
		if m == "" || n.block {
			continue
		}
		if _, seen := writers[m]; !seen {
			order = append(order, m)
		}
		writers[m] = append(writers[m], i)
		room[m] = max(room[m], probes[i+1].DirtyRoomBytes)
	}
	var notes []string
	for _, m := range order {
		c := room[m]
		if c <= 0 {
			continue
		}
		w := float64(len(writers[m])) * float64(written)
		var names []string
		for _, i := range writers[m] {
			names = append(names, ready[i].name)
		}
		slices.Sort(names)
		if w <= c {
			for _, i := range writers[m] {
				probes[i+1].DiskWriteBytesPerSec = 0
			}
			notes = append(notes, fmt.Sprintf("the page cache of the machine of %s takes all %s MB they write (it holds %s MB dirty): its disk does not limit this cast",
				listNames(names), mbps(w), mbps(c)))
			continue
		}
		factor := w / (w - c)
		for _, i := range writers[m] {
			probes[i+1].DiskWriteBytesPerSec *= factor
		}
		notes = append(notes, fmt.Sprintf("the page cache of the machine of %s takes %s of the %s MB they write: its disk limits the rest, as if %.2f× faster",
			listNames(names), mbps(c), mbps(w), factor))
	}
	return notes
}
