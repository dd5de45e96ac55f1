package server

import (
	"strings"
	"testing"

	"dolly/capacity"
)

func TestWriteBack(t *testing.T) {
	const disk, written = 500e6, 1e9
	for _, c := range []struct {
		name     string
		block    []bool    // per node: its target is a block device
		room     float64   // the machine's dirty limit
		wantDisk []float64 // each node's disk figure after
		note     string
	}{
		{"the cache takes it all", []bool{false, false}, 3e9, []float64{0, 0}, "does not limit"},
		{"the cache takes half", []bool{false, false}, 1e9, []float64{2 * disk, 2 * disk}, "as if 2.00× faster"},
		{"block devices have no cache", []bool{true, true}, 3e9, []float64{disk, disk}, ""},
		{"only files count", []bool{false, true}, 0.5e9, []float64{2 * disk, disk}, "as if 2.00× faster"},
		{"no dirty limit known", []bool{false, false}, 0, []float64{disk, disk}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			probes := []capacity.Probe{{}}
			machineOf := []string{"m"}
			var ready []*nodeState
			for i, block := range c.block {
				probes = append(probes, capacity.Probe{DiskWriteBytesPerSec: disk, DirtyRoomBytes: c.room})
				machineOf = append(machineOf, "m")
				ready = append(ready, &nodeState{name: string(rune('a' + i)), block: block})
			}
			notes := writeBack(probes, machineOf, ready, written)
			for i, want := range c.wantDisk {
				if got := probes[i+1].DiskWriteBytesPerSec; got != want {
					t.Errorf("node %d: disk %v, want %v", i, got, want)
				}
			}
			got := strings.Join(notes, "\n")
			if c.note == "" && got != "" || !strings.Contains(got, c.note) {
				t.Errorf("notes %q, want one saying %q", got, c.note)
			}
		})
	}
}
