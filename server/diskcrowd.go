package server

import (
	"context"
	"fmt"
	"maps"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
)

// Nodes whose targets are files on one machine (the demo, an emulated lab,
// VMs on one host) write to one disk. One node measured it alone, as one
// writer with a short queue; in the cast they all write at once, and the
// disk may then take far more in all than one writer got, or less. So
// before the plan they all write their targets at once, the way the cast
// does (see probe.DiskCrowd), and what reached the disk from all of them
// over a window is the rate the model shares out among them.

// diskDoubt is how far one writer's figure may be from a shared disk's
// rate in a crowd, either way: in the demo one writer measured 0.8-1.3
// GB/s and 24 at once 1.3-3.9, and many writers on a spinning disk take
// less in all than one. The crowd is measured (it costs the join about
// half a second) only where the plan could be within that of the disk.
const diskDoubt = 3

// sharedDiskMayBind says whether the shared disk of a machine, at one
// writer's figure, holds r to less than diskDoubt times its rate.
func sharedDiskMayBind(r capacity.Result) bool {
	for _, c := range r.Constraints {
		if c.Kind == capacity.MachineDiskLimit && c.Coef > 0 && c.Bound() < diskDoubt*r.Rate {
			return true
		}
	}
	return false
}

// sharedDiskBinds says whether a shared disk bounds r's rate (within a
// twentieth): the plan's figure then rests on its one short window.
func sharedDiskBinds(r capacity.Result) bool {
	for _, c := range r.Constraints {
		if c.Kind == capacity.MachineDiskLimit && c.Coef > 0 && c.Bound() < 1.05*r.Rate {
			return true
		}
	}
	return false
}

// diskCrowdSettle is how long after the order to write the window opens:
// the orders go out one by one, and every node should be writing at the
// disk's pace, its write-behind full, before any counts (in the demo 24
// nodes on one disk filled theirs within 150-200 ms of the first, once
// 530 ms; a node still filling costs the machine copies its window
// counts, no bytes on the disk), within the join's 3 s at 24 nodes (300
// ms took it to 3.0 s in the lab); every node then counts over about the
// same window, the part they share timed apart (see sharedWindow). diskCrowdWindow is the
// window: long enough that a stall of the disk (a VM's host flushing,
// discards after a delete) weighs in it about as much as in a cast. In
// the demo a fifth of a second measured 355-502 MB/s in 3 of 16 joins,
// where the casts that followed wrote 1.2 GB/s; 0.3 s measured 1.4-2.7
// GB/s in 8 of 8 (and 0.4 s, 1.7-3.1), within what the join may take (3 s
// for 24 nodes).
const (
	diskCrowdSettle = 200 * time.Millisecond
	diskCrowdWindow = 300 * time.Millisecond
)

// sharedDisks returns the nodes of every machine that two or more of them
// share and whose targets are all files (or loop devices over files), by
// machine, if their disk was measured at all: only once the cast is
// confirmed is anything written to a target.
func (s *Server) sharedDisks(ready []*nodeState) map[string][]*nodeState {
	if !s.confirmed() {
		return nil
	}
	on := map[string][]*nodeState{}
	files := map[string]bool{}
	measured := map[string]bool{}
	for _, n := range ready {
		if n.machine == "" {
			continue
		}
		if _, seen := files[n.machine]; !seen {
			files[n.machine] = true
		}
		files[n.machine] = files[n.machine] && n.writesFile()
		measured[n.machine] = measured[n.machine] || (n.probe != nil && n.probe.DiskWriteBytesPerSec > 0)
		on[n.machine] = append(on[n.machine], n)
	}
	shared := map[string][]*nodeState{}
	for m, nodes := range on {
		if len(nodes) >= 2 && files[m] && measured[m] {
			shared[m] = nodes
		}
	}
	return shared
}

// diskCrowds is what the shared disks of machines took from their nodes
// writing at once, with a note for the preview, by machine.
func diskCrowds(wrote crowdAnswers, machines map[string][]*nodeState) (map[string]diskCrowd, map[string]string) {
	disks := map[string]diskCrowd{}
	notes := map[string]string{}
	for m, nodes := range machines {
		if why := wrote.missing(m, nodes); why != "" {
			notes[m] = "disk: " + why
			continue
		}
		d := crowdOnDisk(wrote.results[m])
		if d.rate <= 0 {
			notes[m] = fmt.Sprintf("the %s on one machine wrote nothing to their disk in %v: the model counts what one measured alone", plural(len(nodes), "node"), diskCrowdWindow)
			continue
		}
		disks[m] = d
		notes[m] = d.note(nodes)
	}
	return disks, notes
}

// note says what the model takes from d, measured by nodes.
func (d diskCrowd) note(nodes []*nodeState) string {
	note := fmt.Sprintf("%s on one machine wrote their targets at once: their disk took %s MB/s in all, which the model shares out among them", plural(len(nodes), "node"), mbps(d.rate))
	if d.other > 0 {
		note += fmt.Sprintf(" (the better of two windows: the other took %s)", mbps(d.other))
	}
	_, alone := loneWriter(nodes)
	if d.cpu > 0 && alone > 0 {
		counts := "the model counts the former"
		if !d.counted(1 / alone) {
			counts = "the model counts the latter"
		} else if d.cpu < alone {
			counts = "that writer's probe was disturbed, and the model counts the former"
		}
		note += fmt.Sprintf(", at %.2f ns of the machine's CPU a byte, %.1f× what one writer measured alone: %s", d.cpu*1e9, d.cpu/alone, counts)
	} else if d.cpu > 0 {
		note += fmt.Sprintf(", at %.2f ns of the machine's CPU a byte", d.cpu*1e9)
	} else if d.apart {
		note += fmt.Sprintf("; their windows shared less than %v, too little to time the machine's CPU: the model counts what one writer measured alone", minSharedWindow)
	} else if d.once > 0 && alone > 0 {
		note += fmt.Sprintf("; at %.2f ns of the machine's CPU a byte, %.1f× what one writer measured alone, timed in one window only: the model counts the latter", d.once*1e9, d.once/alone)
	}
	return note
}

// diskCrowd is what a shared disk's nodes measured writing at once.
type diskCrowd struct {
	rate float64 // bytes per second that reached the disk, from all of them
	// cpu is the machine's busy time per byte meanwhile (all cores and
	// kernel threads), in seconds; 0 if unknown.
	cpu float64
	// other is the rate of the other window of a disk measured twice
	// (see doubtedDisks), which took less; 0 when there was one.
	other float64
	// apart says the nodes' windows shared too little to time the
	// machine's CPU (see sharedWindow): cpu is 0.
	apart bool
	// once is a CPU a byte past the doubt that one window only timed
	// (the join had no time to measure it again, or the other window did
	// not time it): the model counts one writer's (see unconfirmedCPU);
	// cpu is 0.
	once float64
}

// counted says whether the model counts d's CPU a byte for a node whose
// own figure is lone (bytes a second a core): where d timed it dearer, or
// so much cheaper that the one writer's probe was disturbed (see
// crowdCheaper: in one demo a lone probe caught in a stall timed 3.6 ns a
// byte, and its crowd 0.3). A crowd a little cheaper than one writer is
// its writers' batches, on a machine doing nothing else: in 4 demos
// whose crowds timed 0.8-0.9 times one writer and counted, the casts ran
// 28% below to 3% above their previews.
func (d diskCrowd) counted(lone float64) bool {
	if d.cpu <= 0 {
		return false
	}
	if lone <= 0 {
		return true
	}
	return d.cpu > 1/lone || d.cpu*crowdCheaper < 1/lone
}

// crowdOnDisk sums what the nodes of one machine wrote in their windows,
// and times the machine's CPU a byte over the part of the windows all of
// them share (see sharedWindow).
func crowdOnDisk(results []control.NetResult) diskCrowd {
	var d diskCrowd
	for _, r := range results {
		d.rate += r.Rate
	}
	busy, shared, timed := sharedWindow(results)
	if shared >= minSharedWindow && d.rate > 0 {
		d.cpu = busy.Seconds() / (d.rate * shared.Seconds())
	} else if timed && d.rate > 0 {
		d.apart = true
	}
	return d
}

// minSharedWindow is the least of their windows the nodes of a disk crowd
// must share for the machine's CPU a byte to be timed: /proc/stat counts
// in hundredths of a second, 20 of them a tenth on 2 cores.
const minSharedWindow = 100 * time.Millisecond

// sharedWindow is the part of the nodes' windows that all of them share
// (0 if none, or if a node did not time its window), and the machine's
// busy time over it: the nodes were told one by one, and each counts over
// its own window (see probe.DiskCrowd.PushFor), tens of milliseconds
// apart in the demo's 24. Each timed the machine's busy time at both ends
// of its window on the machine's one clock: the latest start and the
// earliest end bound the shared part.
// timed says every node timed its window.
func sharedWindow(results []control.NetResult) (busy, shared time.Duration, timed bool) {
	var from, to int64
	var busyFrom, busyTo float64
	for i, r := range results {
		if r.WindowTo <= r.WindowFrom || r.BusyTo <= r.BusyFrom {
			return 0, 0, false
		}
		if i == 0 || r.WindowFrom > from {
			from, busyFrom = r.WindowFrom, r.BusyFrom
		}
		if i == 0 || r.WindowTo < to {
			to, busyTo = r.WindowTo, r.BusyTo
		}
	}
	if len(results) == 0 {
		return 0, 0, false
	}
	if to <= from || busyTo <= busyFrom {
		return 0, 0, true
	}
	return time.Duration((busyTo - busyFrom) * float64(time.Second)), time.Duration(to - from), true
}

// loneWriter is what the node probing the machine of nodes measured
// writing its target alone: the rate, and the CPU time per byte; 0 for
// what none did.
func loneWriter(nodes []*nodeState) (rate, cost float64) {
	for _, n := range nodes {
		if p := n.probe; p != nil {
			if rate == 0 {
				rate = p.DiskWriteBytesPerSec
			}
			if cost == 0 && p.DiskWriteCPUBytesPerSec > 0 {
				cost = 1 / p.DiskWriteCPUBytesPerSec
			}
		}
	}
	return rate, cost
}

// planRests says what of a shared machine the plan chosen with its crowds'
// figures rests on: a shared disk, or a machine's CPU.
type planRests struct{ disk, cpu bool }

// doubtedDisks returns the machines whose shared disk is measured again:
// all of them when one binds the plan, else those that took less from all
// their nodes at once than one writer alone, or cost the machine more than
// diskCPUDoubt times one writer's CPU a byte (diskCPUDoubtBinding where a
// machine's CPU binds the plan). A VM host's disk stalls now and then, and
// a window of a third of a second that caught a stall holds the cast to
// it: in the demo 3 windows of 26 took 1.0-1.3 GB/s, and the casts that
// followed wrote 1.5. A disk that seeks among its writers takes as little
// the second time.
func doubtedDisks(found map[string]diskCrowd, machines map[string][]*nodeState, binding planRests) map[string][]*nodeState {
	doubt := float64(diskCPUDoubt)
	if binding.cpu {
		doubt = diskCPUDoubtBinding
	}
	doubted := map[string][]*nodeState{}
	for m, d := range found {
		rate, cost := loneWriter(machines[m])
		if binding.disk || d.rate < rate || cost > 0 && d.cpu > doubt*cost || binding.cpu && d.apart {
			doubted[m] = machines[m]
		}
	}
	return doubted
}

// unconfirmed sets aside, in found, what doubtedDisks would measure again
// and the join has no time to: one window is too little to count.
//   - A disk that took less from all its nodes at once than one writer
//     alone may have stalled in its window: the model counts what one
//     writer measured (in the demo one window took 110 MB/s, and the cast
//     wrote 2.4 GB/s). Should the disk take that little in the cast, the
//     live check re-plans; a plan made for a stall would not be.
//   - A CPU a byte past the doubt: the model counts one writer's (see
//     diskCrowd.once). In 10 demos one window of 24 writers cost 1.9-4.3
//     times one writer's CPU a byte, and the casts then cost the machine
//     0.61-0.84 times what the model counted (once 1.09); with one
//     writer's figure, 18 casts came to 0.82-1.24 times.
//
// It returns the notes of the disks set aside, by machine.
func unconfirmed(found map[string]diskCrowd, machines map[string][]*nodeState, binding planRests) map[string]string {
	notes := map[string]string{}
	for m, d := range found {
		nodes := machines[m]
		if rate, _ := loneWriter(nodes); d.rate < rate {
			delete(found, m)
			notes[m] = fmt.Sprintf("%s on one machine wrote their targets at once: their disk took %s MB/s in all, less than one writer alone (%s MB/s), in one window the join had no time to measure again: the model counts what one measured alone", plural(len(nodes), "node"), mbps(d.rate), mbps(rate))
		}
	}
	maps.Copy(notes, unconfirmedCPU(found, machines, binding))
	return notes
}

// unconfirmedCPU sets aside, in found, the CPU a byte of the machines'
// disks that is past the doubt and was timed in one window only (see
// unconfirmed), and returns their notes, by machine.
func unconfirmedCPU(found map[string]diskCrowd, machines map[string][]*nodeState, binding planRests) map[string]string {
	doubt := float64(diskCPUDoubt)
	if binding.cpu {
		doubt = diskCPUDoubtBinding
	}
	notes := map[string]string{}
	for m, nodes := range machines {
		d, ok := found[m]
		if _, cost := loneWriter(nodes); ok && cost > 0 && d.cpu > doubt*cost {
			d.once, d.cpu = d.cpu, 0
			found[m] = d
			notes[m] = d.note(nodes)
		}
	}
	return notes
}

// diskCPUDoubt is how many times one writer's CPU a byte a disk's crowd
// may cost the machine before it is measured again: the crowd times the
// whole machine's busy time over its window, a moment the machine runs
// slow included. Over about 25 crowds in the lab and the demo it cost at
// most 2.7 times, and once 5.5, in a demo whose cast ran at twice the
// preview's rate. Where the machine's CPU binds the plan, the preview
// rests on the figure: past diskCPUDoubtBinding it is measured again. In
// 8 demos the first window of 24 writers cost 1.9-2.5 times one writer
// in 5, and the casts then wrote at 0.7-0.8 times that cost; every second
// window cost 1.2-1.3 times.
const diskCPUDoubt, diskCPUDoubtBinding = 3, 1.5

// betterWindow is what the model takes of a disk measured twice: the
// better window's rate, with what the other took, and the lower of the
// two windows' CPU a byte.
func betterWindow(first, second diskCrowd) diskCrowd {
	better, worse := first, second
	if second.rate > first.rate {
		better, worse = second, first
	}
	better.other = worse.rate
	if worse.cpu > 0 && (better.cpu <= 0 || worse.cpu < better.cpu) {
		better.cpu = worse.cpu
	}
	better.apart = better.cpu <= 0 && (better.apart || worse.apart)
	return better
}

// measureDisksAgain measures the disks of machines in a crowd once more,
// pushed as the first time through the paths the nodes set up then (ids
// numbers them; a node keeps its path for another order until the join
// ends). A seeking disk takes as little again; a stall seldom lasts into a
// second window, and the better of the two is what the disk takes over a
// cast.
func (s *Server) measureDisksAgain(ctx context.Context, machines map[string][]*nodeState, ids map[*nodeState]uint64) map[string]diskCrowd {
	wrote := s.crowdRound(ctx, crowdAsk{machines, func(n *nodeState) control.CrowdProbe {
		return control.CrowdProbe{ID: ids[n], Disk: true, Go: true,
			SettleMillis: int(diskCrowdSettle.Milliseconds()), WindowMillis: int(diskCrowdWindow.Milliseconds())}
	}})[0]
	found, _ := diskCrowds(wrote, machines) // where it failed, the first window stands
	return found
}
