package server

import (
	"context"
	"fmt"
	"maps"
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
	// other is the rate of the other window of a crowd measured twice
	// (see doubtedCrowds), which pushed less; 0 when there was one.
	other float64
}

// slowdown is how many times its lone cost the data path costs in the
// crowd: all cores for the wall time, over the bytes, against the lone
// node's CPU time per byte. Never less than 1: the crowd's sum is the
// noisier figure, and a crowd a little cheaper than alone is its batches
// (see crowdCheaper).
func (c crowd) slowdown() float64 {
	if c.rate <= 0 || c.alone <= 0 {
		return 1
	}
	return max(1, float64(c.cores)/c.rate/c.alone)
}

// crowdCheaper bounds how much less a byte of the data path may cost in a
// crowd than alone. A crowd's relays wake for more bytes at a time, so its
// bytes cost a little less: the lone cost came to 0.6-1.7 times the
// crowd's over 25 demos. A lone probe dearer than this was disturbed (3.2
// and 6.7 times in two more demos, whose previews then put zstd above the
// raw chain, and the zstd chain ran at half its rate).
const crowdCheaper = 2.5

// disturbed says whether the crowd shows the lone probe's data path
// figures wrong: the same path cost far less per byte with every node of
// the machine pushing at once (see crowdCheaper).
func (c crowd) disturbed() bool {
	return c.rate > 0 && c.alone > 0 && c.crowdCost()*crowdCheaper < c.alone
}

// crowdCost is the data path's CPU time per byte in the crowd: all the
// cores for the wall time, over the bytes.
func (c crowd) crowdCost() float64 {
	return float64(c.cores) / c.rate
}

// correct returns p, a probe of one of the crowd's nodes, with the
// crowd's cost for its data path where the crowd shows the machine's lone
// probe disturbed (see crowdCheaper), as the preview's note says; else p
// as it is.
func (c crowd) correct(p capacity.Probe) capacity.Probe {
	if !c.disturbed() {
		return p
	}
	return withPathCost(p, c.crowdCost())
}

// correctDisturbed corrects the nodes' probes (probes[1:]; probes[i] runs
// on machineOf[i]) on machines whose crowd shows the lone probe
// disturbed. It runs on the figures the model takes, after any merging of
// a machine's probes, which may have put the source's stream figure
// beside a disturbed relay's: the path then costs the crowd's all the
// same.
func correctDisturbed(probes []capacity.Probe, machineOf []string, crowds map[string]crowd) {
	for i := 1; i < len(probes); i++ {
		if c, ok := crowds[machineOf[i]]; ok {
			probes[i] = c.correct(probes[i])
		}
	}
}

// withPathCost returns p with its data path figures (the relay's and a
// stream's) scaled so that probe.PathCost comes to cost; p unchanged where
// its memory copy alone costs that much or its path was not measured.
func withPathCost(p capacity.Probe, cost float64) capacity.Probe {
	path := probe.PathCost(p)
	if path <= 0 {
		return p
	}
	copyCost := 1 / p.MemcpyBytesPerSec
	if cost <= copyCost {
		return p
	}
	f := (cost - copyCost) / (path - copyCost)
	p.RelayBytesPerSec /= f
	p.NetStreamBytesPerSec /= f
	return p
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

// sharedFigures is what measureShared found, by machine key.
type sharedFigures struct {
	crowds   map[string]crowd
	disks    map[string]diskCrowd
	decoders map[string]decodeCrowd
	// encodeSlowdown is the source's encoder's (see encodeAmong).
	encodeSlowdown float64
}

// measureShared measures what the nodes sharing a machine cost each other
// (see crowd), with decode how fast they decode zstd all at once (see
// decodeCrowd), and with disks the disks they share (see diskCrowd). All
// are set up in one round, every node's data path, decoders and write
// path at once, so that the join waits for one setting up, not three;
// then each is pushed in a round of its own, alone on the machine. It
// returns what it found, with notes for the preview.
//
// plan is the plan chosen with such figures: a figure it rests on that
// looks off is measured twice (see doubtedCrowds and doubtedDisks), where
// the join has time for it (see joinHasRoom).
func (s *Server) measureShared(ctx context.Context, ready []*nodeState, disks, decode bool, plan func(map[string]crowd, map[string]diskCrowd) capacity.Result) (sharedFigures, []string) {
	crowded, alone := s.crowdedMachines(ready)
	var shared map[string][]*nodeState
	if disks {
		shared = s.sharedDisks(ready)
	}
	if len(crowded) == 0 && len(shared) == 0 {
		return sharedFigures{}, nil
	}
	var decoding map[string][]*nodeState
	if decode {
		decoding = decoderCrowds(crowded, alone)
	}
	for m, nodes := range crowded {
		also := ""
		if n := len(decoding[m]); n > 0 {
			also = fmt.Sprintf(", then %d of them decode zstd at once", n)
		}
		fmt.Fprintf(s.cfg.Out, "measuring what the %s on one machine cost each other: all push their data path at once%s\n", plural(len(nodes), "node"), also)
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
	cpuIDs, diskIDs, decodeIDs := map[*nodeState]uint64{}, map[*nodeState]uint64{}, map[*nodeState]uint64{}
	prepare := func(ids map[*nodeState]uint64, disk bool) func(*nodeState) control.CrowdProbe {
		return func(n *nodeState) control.CrowdProbe {
			id++
			ids[n] = id
			return control.CrowdProbe{ID: id, Disk: disk}
		}
	}
	prepareDecoders := func(n *nodeState) control.CrowdProbe {
		id++
		decodeIDs[n] = id
		return decodeOrder(id, false)
	}
	prepared := s.crowdRound(ctx, crowdAsk{crowded, prepare(cpuIDs, false)}, crowdAsk{shared, prepare(diskIDs, true)}, crowdAsk{decoding, prepareDecoders})
	preparing := time.Since(start)
	s.log.Debug("crowd prepared", "took", preparing)
	var notes []string
	cpuGoing := prepared[0].going(crowded, "", &notes)
	diskGoing := prepared[1].going(shared, "disk: ", &notes)
	decodeGoing := prepared[2].going(decoding, "decoders: ", &notes)

	push := func(ids map[*nodeState]uint64) func(*nodeState) control.CrowdProbe {
		return func(n *nodeState) control.CrowdProbe {
			return control.CrowdProbe{ID: ids[n], Go: true,
				SettleMillis: int(crowdSettle.Milliseconds()), WindowMillis: int(crowdWindow.Milliseconds())}
		}
	}
	pushedAt := time.Now()
	pushed := s.crowdRound(ctx, crowdAsk{cpuGoing, push(cpuIDs)})[0]
	crowds := pathCrowds(pushed, cpuGoing, alone, &notes)
	s.log.Debug("crowd pushed", "took", time.Since(pushedAt))
	// Measured again, a relay's path is set up anew, then pushed, and the
	// disks' round still follows.
	again := time.Since(pushedAt) + preparing
	if len(diskGoing) > 0 {
		again += diskCrowdSettle + diskCrowdWindow
	}
	if doubted := doubtedCrowds(crowds, cpuGoing, mayDoubt(crowds) && machineCPUBinds(plan(crowds, nil))); len(doubted) > 0 && s.joinHasRoom(again) {
		// A relay's path is pushed once: set up anew. Where the second
		// time fails, the first window stands.
		againIDs := map[*nodeState]uint64{}
		var failed []string
		going := s.crowdRound(ctx, crowdAsk{doubted, prepare(againIDs, false)})[0].going(doubted, "", &failed)
		again := pathCrowds(s.crowdRound(ctx, crowdAsk{going, push(againIDs)})[0], going, alone, &failed)
		for m, c := range again {
			crowds[m] = fasterCrowd(crowds[m], c)
		}
		for _, why := range failed {
			notes = append(notes, "measured again, the crowd failed ("+why+"): its first window stands")
		}
	}
	for _, c := range crowds {
		notes = append(notes, c.note())
	}

	decodedAt := time.Now()
	encoded := s.encodeAmong(decodeGoing[s.sourceMachine(ready)])
	decoded := s.crowdRound(ctx, crowdAsk{decodeGoing, func(n *nodeState) control.CrowdProbe {
		return decodeOrder(decodeIDs[n], true)
	}})[0]
	decoders := decodeCrowds(decoded, decodeGoing, alone, &notes)
	encodeSlowdown := <-encoded
	s.log.Debug("decoders crowd", "took", time.Since(decodedAt), "encoder_slowdown", encodeSlowdown)
	for _, d := range decoders {
		notes = append(notes, d.note())
	}
	if encodeSlowdown > 0 {
		notes = append(notes, encodeCrowdNote(len(decodeGoing[s.sourceMachine(ready)]), encodeSlowdown, s.profile.EncodeRate))
	}

	wroteAt := time.Now()
	wrote := s.crowdRound(ctx, crowdAsk{diskGoing, func(n *nodeState) control.CrowdProbe {
		return control.CrowdProbe{ID: diskIDs[n], Disk: true, Go: true,
			SettleMillis: int(diskCrowdSettle.Milliseconds()), WindowMillis: int(diskCrowdWindow.Milliseconds())}
	}})[0]
	found, diskNotes := diskCrowds(wrote, diskGoing)
	s.log.Debug("disk crowd wrote", "took", time.Since(wroteAt))
	var binding planRests
	if len(found) > 0 {
		r := plan(crowds, found)
		binding = planRests{disk: s.cfg.measureDisks || sharedDiskBinds(r), cpu: machineCPUBinds(r)}
	}
	if doubted := doubtedDisks(found, diskGoing, binding); len(doubted) > 0 && s.joinHasRoom(time.Since(wroteAt)) {
		again := s.measureDisksAgain(ctx, doubted, diskIDs)
		failed, timedOnce := map[string][]*nodeState{}, map[string][]*nodeState{}
		for m, nodes := range doubted {
			second, ok := again[m]
			if !ok { // the first window stands alone
				failed[m] = nodes
				continue
			}
			if found[m].cpu <= 0 || second.cpu <= 0 {
				timedOnce[m] = nodes
			}
			d := betterWindow(found[m], second)
			found[m], diskNotes[m] = d, d.note(nodes)
		}
		maps.Copy(diskNotes, unconfirmed(found, failed, binding))
		maps.Copy(diskNotes, unconfirmedCPU(found, timedOnce, binding))
	} else if len(doubted) > 0 {
		maps.Copy(diskNotes, unconfirmed(found, doubted, binding))
	}
	for _, note := range diskNotes {
		notes = append(notes, note)
	}
	slices.Sort(notes)
	return sharedFigures{crowds: crowds, disks: found, decoders: decoders, encodeSlowdown: encodeSlowdown}, notes
}

// mayDoubt says whether a crowd's slowdown is past crowdDoubtBinding,
// where whether a machine's CPU binds the plan decides its doubt.
func mayDoubt(crowds map[string]crowd) bool {
	for _, c := range crowds {
		if c.slowdown() > crowdDoubtBinding {
			return true
		}
	}
	return false
}

// machineCPUBinds says whether the CPU of a machine that hosts share binds
// r's rate: the plan's figure then rests on the crowds' short windows.
func machineCPUBinds(r capacity.Result) bool {
	return slices.ContainsFunc(r.Binding, func(c capacity.Constraint) bool { return c.Kind == capacity.MachineCPULimit })
}

// joinBudget is what the join may cost, from the last node joining to the
// first byte sent, probes and the image's profile included; joinSlack is
// what is kept of it for a round that runs longer than the last (in the
// demo a second disk round took 0.8 s more than the first, its disk
// stalling) and for the plan.
const joinBudget, joinSlack = 3 * time.Second, 400 * time.Millisecond

// joinHasRoom says whether a figure may be measured again, which costs
// about took: the join keeps within joinBudget. Where it has not, a
// crowd's slowdown stands, and a disk's doubted figures are set aside
// (see unconfirmed).
func (s *Server) joinHasRoom(took time.Duration) bool {
	s.mu.Lock()
	last := s.lastJoined
	s.mu.Unlock()
	return last.IsZero() || time.Since(last)+took+joinSlack <= joinBudget
}

// pathCrowds is what the machines' nodes pushed through their data paths
// at once, by machine; notes gets why a machine has none.
func pathCrowds(pushed crowdAnswers, machines map[string][]*nodeState, alone map[string]*capacity.Probe, notes *[]string) map[string]crowd {
	crowds := map[string]crowd{}
	for m, nodes := range machines {
		if why := pushed.missing(m, nodes); why != "" {
			*notes = append(*notes, why)
			continue
		}
		c := crowd{nodes: len(nodes), cores: alone[m].Cores, alone: probe.PathCost(*alone[m])}
		for _, r := range pushed.results[m] {
			c.rate += r.Rate
		}
		if c.rate <= 0 {
			*notes = append(*notes, fmt.Sprintf("the %s on one machine pushed nothing through their data paths: the model counts what one measured alone", plural(len(nodes), "node")))
			continue
		}
		crowds[m] = c
	}
	return crowds
}

// crowdDoubt is the slowdown past which a crowd is measured again: a
// window of a fifth of a second may catch the machine running slow. Over
// about 50 crowds in the lab and the demo the slowdown came to 1.0-1.1,
// once 1.7 (a cast that then ran that slow), and once 3.0, in a demo whose
// cast ran at 4 times the preview's rate. Where the machine's CPU binds
// the plan, the preview is the slowdown's: past crowdDoubtBinding it is
// measured again (in the demo one window of 1.5 held the preview to 0.73
// times the cast's rate; the casts ran at 1.0-1.1).
const crowdDoubt, crowdDoubtBinding = 2, 1.25

// doubtedCrowds returns the machines whose crowd is measured again: those
// whose slowdown is past crowdDoubt, or crowdDoubtBinding where a
// machine's CPU binds the plan.
func doubtedCrowds(crowds map[string]crowd, machines map[string][]*nodeState, cpuBinds bool) map[string][]*nodeState {
	doubt := float64(crowdDoubt)
	if cpuBinds {
		doubt = crowdDoubtBinding
	}
	doubted := map[string][]*nodeState{}
	for m, c := range crowds {
		if c.slowdown() > doubt {
			doubted[m] = machines[m]
		}
	}
	return doubted
}

// fasterCrowd is what the model takes of a crowd measured twice: the
// faster window, with what the other pushed. A machine that slows its
// crowd down does so both times; a moment it ran slow seldom lasts into
// a second window.
func fasterCrowd(first, second crowd) crowd {
	if second.rate > first.rate {
		second.other = first.rate
		return second
	}
	first.other = second.rate
	return first
}

// note says what the model takes from c, for the preview.
func (c crowd) note() string {
	note := fmt.Sprintf("%s on one machine of %s pushed their data path at once: %s MB/s in all", plural(c.nodes, "node"), plural(c.cores, "core"), mbps(c.rate))
	if c.other > 0 {
		note += fmt.Sprintf(" (the faster of two windows: the other pushed %s)", mbps(c.other))
	}
	if c.disturbed() {
		return note + fmt.Sprintf(", %.1f× what one node's probe allows; that probe was disturbed, and the model counts the crowd's cost for the data path", c.alone/c.crowdCost())
	}
	return note + fmt.Sprintf("; the model counts every CPU figure of that machine at %.1f× what one node measured alone", c.slowdown())
}
