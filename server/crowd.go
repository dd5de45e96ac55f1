package server

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/dolly/probe"
)

// A machine that more nodes share than it has cores (the demo, an emulated
// lab, a VM host) runs them slower than their figures say: one of them
// measured the machine alone, and what they cost each other (wake-ups,
// context switches, caches taken by the others, kernel work charged to no
// one, cores left idle while they wait on one another) is not in its
// figures. So before the plan every node of such a machine pushes through
// its data path from the same moment, without a pause; what passes all of
// them in a window when all push is the machine's throughput in a crowd,
// which, against what the same path cost the lone node, says how much more
// every CPU figure of that machine costs there (see crowd.slowdown).

// crowdSettle is how long after the order to push the window opens: the
// orders go out one by one (24 in a few milliseconds), and each node's
// path, warm already, must be pushing before any counts. crowdWindow is
// the window; crowdWait bounds each round.
const (
	crowdSettle = 60 * time.Millisecond
	crowdWindow = 200 * time.Millisecond
	crowdWait   = 3 * time.Second
)

// crowd is what one crowded machine's nodes measured together.
type crowd struct {
	nodes int
	cores int
	rate  float64 // bytes per second of wall time, all the nodes' together
	alone float64 // CPU seconds per byte of the same path, timed alone
}

// slowdown is how many times its lone cost the data path costs in the
// crowd: all cores for the wall time, over the bytes, against the lone
// node's CPU time per byte. Never less than 1: the crowd's sum is the
// noisier figure, and a crowd is no faster than its members alone.
func (c crowd) slowdown() float64 {
	if c.rate <= 0 || c.alone <= 0 {
		return 1
	}
	return max(1, float64(c.cores)/c.rate/c.alone)
}

// contention is the model's Machine.Contention for hosts hosts of a cast
// on the machine: each pays this share more of its CPU cost per other
// host, so that together they pay the measured slowdown on every figure
// (the data path's, and the decoding's and writing's, which share the same
// cores, caches and wake-ups).
func (c crowd) contention(hosts int) float64 {
	if hosts < 2 {
		return 0
	}
	return min(1, (c.slowdown()-1)/float64(hosts-1))
}

// crowdedMachines returns the nodes of every machine that more hosts of
// the cast share than it has cores, by machine, with the probe that
// measured each alone.
func (s *Server) crowdedMachines(ready []*nodeState) (map[string][]*nodeState, map[string]*capacity.Probe) {
	on := map[string][]*nodeState{}
	alone := map[string]*capacity.Probe{}
	for _, n := range ready {
		on[n.machine] = append(on[n.machine], n)
		if n.probe != nil && alone[n.machine] == nil {
			alone[n.machine] = n.probe
		}
	}
	src := s.sourceMachine(ready)
	crowded := map[string][]*nodeState{}
	for m, nodes := range on {
		p := alone[m]
		hosts := len(nodes)
		if m == src {
			hosts++
		}
		if m != "" && p != nil && probe.PathCost(*p) > 0 && len(nodes) >= 2 && hosts > p.Cores {
			crowded[m] = nodes
		}
	}
	return crowded, alone
}

// shareCores tells the nodes of every crowded machine (crowdedMachines:
// more of the cast's hosts than cores) to run their Go code on one thread
// at a time (see control.Share), before the network and crowd probes, so
// that those measure the nodes as they will cast. A node's own probe ran
// before, on all cores, but it times its work on one thread. A node that
// has left makes Send fail, which its own connection's reader reports.
func (s *Server) shareCores(ready []*nodeState) {
	crowded, _ := s.crowdedMachines(ready)
	share := control.Share{Procs: 1} // more hosts than cores: less than one each
	for _, nodes := range crowded {
		for _, n := range nodes {
			n.conn.Send(control.Message{Type: control.MsgShare, Share: &share})
		}
	}
}

// measureShared measures what the nodes sharing a machine cost each other
// (see crowd) and, with disks, the disks they share (see diskCrowd). The
// two are set up in one round, every node's data path and write path at
// once, so that the join waits for one setting up, not two; then each is
// pushed in a round of its own, alone on the machine. It returns what it
// found by machine, with notes for the preview.
//
// binds says whether a shared disk binds the plan chosen with such
// figures; such a disk is measured twice (see doubtedDisks).
func (s *Server) measureShared(ctx context.Context, ready []*nodeState, disks bool, binds func(map[string]crowd, map[string]diskCrowd) bool) (map[string]crowd, map[string]diskCrowd, []string) {
	crowded, alone := s.crowdedMachines(ready)
	var shared map[string][]*nodeState
	if disks {
		shared = s.sharedDisks(ready)
	}
	if len(crowded) == 0 && len(shared) == 0 {
		return nil, nil, nil
	}
	for _, nodes := range crowded {
		fmt.Fprintf(s.cfg.Out, "measuring what the %s on one machine cost each other: all push their data path at once\n", plural(len(nodes), "node"))
	}
	for _, nodes := range shared {
		fmt.Fprintf(s.cfg.Out, "measuring the disk the %s on one machine share: all write their targets at once, in place\n", plural(len(nodes), "node"))
	}
	start := time.Now()
	defer func() {
		s.log.Debug("crowd probes", "machines", len(crowded), "disks", len(shared), "took", time.Since(start))
	}()
	// Every node sets up and warms its paths first, so that all push from
	// the same moment and none is still setting up while the others count.
	id := uint64(time.Now().UnixNano())
	cpuIDs, diskIDs := map[*nodeState]uint64{}, map[*nodeState]uint64{}
	prepare := func(ids map[*nodeState]uint64, disk bool) func(*nodeState) control.CrowdProbe {
		return func(n *nodeState) control.CrowdProbe {
			id++
			ids[n] = id
			return control.CrowdProbe{ID: id, Disk: disk}
		}
	}
	prepared := s.crowdRound(ctx, crowdAsk{crowded, prepare(cpuIDs, false)}, crowdAsk{shared, prepare(diskIDs, true)})
	s.log.Debug("crowd prepared", "took", time.Since(start))
	var notes []string
	cpuGoing := prepared[0].going(crowded, "", &notes)
	diskGoing := prepared[1].going(shared, "disk: ", &notes)

	pushed := s.crowdRound(ctx, crowdAsk{cpuGoing, func(n *nodeState) control.CrowdProbe {
		return control.CrowdProbe{ID: cpuIDs[n], Go: true,
			SettleMillis: int(crowdSettle.Milliseconds()), WindowMillis: int(crowdWindow.Milliseconds())}
	}})[0]
	crowds := map[string]crowd{}
	for m, nodes := range cpuGoing {
		if why := pushed.missing(m, nodes); why != "" {
			notes = append(notes, why)
			continue
		}
		c := crowd{nodes: len(nodes), cores: alone[m].Cores, alone: probe.PathCost(*alone[m])}
		for _, r := range pushed.results[m] {
			c.rate += r.Rate
		}
		if c.rate <= 0 {
			notes = append(notes, fmt.Sprintf("the %s on one machine pushed nothing through their data paths: the model counts what one measured alone", plural(len(nodes), "node")))
			continue
		}
		crowds[m] = c
		notes = append(notes, fmt.Sprintf("%s on one machine of %s pushed their data path at once: %s MB/s in all; the model counts every CPU figure of that machine at %.1f× what one node measured alone",
			plural(c.nodes, "node"), plural(c.cores, "core"), mbps(c.rate), c.slowdown()))
	}

	wrote := s.crowdRound(ctx, crowdAsk{diskGoing, func(n *nodeState) control.CrowdProbe {
		return control.CrowdProbe{ID: diskIDs[n], Disk: true, Go: true,
			SettleMillis: int(diskCrowdSettle.Milliseconds()), WindowMillis: int(diskCrowdWindow.Milliseconds())}
	}})[0]
	found, diskNotes := diskCrowds(wrote, diskGoing)
	if doubted := doubtedDisks(found, diskGoing, len(found) > 0 && binds(crowds, found)); len(doubted) > 0 {
		for m, d := range s.measureDisksAgain(ctx, doubted, diskIDs) {
			d = betterWindow(found[m], d)
			found[m], diskNotes[m] = d, d.note(doubted[m])
		}
	}
	for _, note := range diskNotes {
		notes = append(notes, note)
	}
	slices.Sort(notes)
	return crowds, found, notes
}

// doubtedDisks returns the machines whose shared disk is measured again:
// all of them when one binds the plan (binding), else those that took
// less from all their nodes at once than one writer alone. A VM host's
// disk stalls now and then, and a window of a third of a second that
// caught a stall holds the cast to it: in the demo 3 windows of 26 took
// 1.0-1.3 GB/s, and the casts that followed wrote 1.5. A disk that seeks
// among its writers takes as little the second time.
func doubtedDisks(found map[string]diskCrowd, machines map[string][]*nodeState, binding bool) map[string][]*nodeState {
	doubted := map[string][]*nodeState{}
	for m, d := range found {
		if alone, _ := loneWriter(machines[m]); binding || d.rate < alone {
			doubted[m] = machines[m]
		}
	}
	return doubted
}

// betterWindow is what the model takes of a disk measured twice: the
// better window, with what the other took.
func betterWindow(first, second diskCrowd) diskCrowd {
	if second.rate > first.rate {
		second.other = first.rate
		return second
	}
	first.other = second.rate
	return first
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

// crowdAnswers are the answers of one round of crowd probes.
type crowdAnswers struct {
	results map[string][]control.NetResult // by machine, good ones
	failed  map[string]string              // by machine, an error
}

// missing says, for a note, why not all nodes of machine m answered well;
// "" if they did. A node that did not took its share with it: the sum
// would then understate the machine.
func (a crowdAnswers) missing(m string, nodes []*nodeState) string {
	if got := len(a.results[m]); got < len(nodes) {
		return fmt.Sprintf("%d of the %s on one machine measured their data path together (%s): the model counts what one measured alone", got, plural(len(nodes), "node"), cmp.Or(a.failed[m], "no answer in time"))
	}
	return ""
}

// going returns the machines all of whose nodes set their path up, and
// notes (with prefix) why the others are left out.
func (a crowdAnswers) going(machines map[string][]*nodeState, prefix string, notes *[]string) map[string][]*nodeState {
	going := map[string][]*nodeState{}
	for m, nodes := range machines {
		if why := a.missing(m, nodes); why != "" {
			*notes = append(*notes, prefix+why)
			continue
		}
		going[m] = nodes
	}
	return going
}

// crowdAsk is one kind of crowd probe in a round: the machines whose nodes
// take part, and each node's order.
type crowdAsk struct {
	machines map[string][]*nodeState
	order    func(*nodeState) control.CrowdProbe
}

// crowdRound sends every node of every ask its order, all at once, and
// collects the answers, one crowdAnswers for each ask.
func (s *Server) crowdRound(ctx context.Context, asks ...crowdAsk) []crowdAnswers {
	w, release := s.awaitNetResults()
	defer release()
	type asked struct {
		ask     int
		machine string
	}
	by := map[uint64]asked{}
	var all []uint64
	for i, a := range asks {
		for m, nodes := range a.machines {
			for _, n := range nodes {
				o := a.order(n)
				if n.conn.Send(control.Message{Type: control.MsgCrowdProbe, CrowdProbe: &o}) == nil {
					by[o.ID] = asked{i, m}
					all = append(all, o.ID)
				}
			}
		}
	}
	answers := make([]crowdAnswers, len(asks))
	for i := range answers {
		answers[i] = crowdAnswers{results: map[string][]control.NetResult{}, failed: map[string]string{}}
	}
	if len(all) == 0 {
		return answers
	}
	for id, r := range w.wait(ctx, all, time.Now().Add(crowdWait)) {
		a, m := &answers[by[id].ask], by[id].machine
		if r.Error != "" {
			a.failed[m] = r.Error
			continue
		}
		a.results[m] = append(a.results[m], r)
	}
	return answers
}

// sourceMachine is the machine key of the source, as the nodes' are made.
func (s *Server) sourceMachine(ready []*nodeState) string {
	if len(ready) == 0 {
		return ""
	}
	ip := ready[0].conn.LocalAddr().(*net.TCPAddr).IP
	return machineKey(probe.MachineID(), probe.MACs(), ip.String())
}

// nodesHere counts the nodes running on dolly-server's own machine, and
// sums the CPU time their part of the cast cost them; reported says
// whether every one of them reported it.
func (s *Server) nodesHere(ready []*nodeState) (n int, cpu time.Duration, reported bool) {
	here := s.sourceMachine(ready)
	if here == "" {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	reported = true
	for _, node := range ready {
		if node.machine == here {
			n++
			cpu += node.castCPU
			reported = reported && node.castCPU > 0
		}
	}
	return n, cpu, reported
}
