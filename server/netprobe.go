package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/dial"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
)

// The network is measured before the plan, with bandwidth probes that load
// the links the way plans do: the source sends to every node at once (a
// star), then every node sends to the next at once, the last to the first
// (a ring, which loads each link in both directions as a chain does). A
// NIC's reported speed is only a ceiling; a node whose probe failed has no
// measured link, and the model is told so.

// netProbeBytes bounds one probe stream, so that on fast links a probe is
// bounded by bytes before its time.
const netProbeBytes = 256 << 20

// ringCPUBytes is the least a node must receive in the ring for its CPU
// time per byte to count: below it, the CPU clock's grain shows.
const ringCPUBytes = 1 << 20

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

// netWaiter collects the nodes' reports of the probes they received.
type netWaiter struct {
	mu      sync.Mutex
	results map[uint64]control.NetResult
	changed chan struct{}
}

func newNetWaiter() *netWaiter {
	return &netWaiter{results: map[uint64]control.NetResult{}, changed: make(chan struct{}, 1)}
}

func (w *netWaiter) report(r control.NetResult) {
	w.mu.Lock()
	if _, seen := w.results[r.ID]; !seen || r.Error == "" {
		w.results[r.ID] = r
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// wait returns the reports of ids that came before deadline.
func (w *netWaiter) wait(ctx context.Context, ids []uint64, deadline time.Time) map[uint64]control.NetResult {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		w.mu.Lock()
		got := map[uint64]control.NetResult{}
		for _, id := range ids {
			if r, ok := w.results[id]; ok {
				got[id] = r
			}
		}
		w.mu.Unlock()
		if len(got) == len(ids) {
			return got
		}
		select {
		case <-w.changed:
		case <-t.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
}

// measureNetwork runs the star and the ring over the ready nodes, each for
// s.cfg.NetProbe.
func (s *Server) measureNetwork(ctx context.Context, ready []*nodeState) (netFigures, []string) {
	start := time.Now()
	f := netFigures{star: map[string]float64{}, ringIn: map[string]float64{}, ringUp: map[string]float64{}, ringCPU: map[string]float64{}, ringMachine: map[string]float64{}, ringBusy: map[string]float64{}}
	var notes []string
	d := s.cfg.NetProbe
	w, release := s.awaitNetResults()
	defer release()
	id := uint64(time.Now().UnixNano()) // unique for this server's probes

	// Every probe's id first: the star's, then the ring's.
	starIDs, ringIDs := make([]uint64, len(ready)), make([]uint64, len(ready))
	for i := range ready {
		id++
		starIDs[i] = id
	}
	for i := range ready {
		id++
		ringIDs[i] = id
	}
	// The ring's orders go out before the star, while the links are quiet:
	// each node sends to the next as soon as the star's probe to it has
	// ended. Sent after the star, they queued behind what the source's
	// link still held of it (in a lab of 24 nodes at 100 Mbit/s the ring
	// started 0.45 s after the star had ended).
	ring := len(ready) > 1
	if ring {
		for i, n := range ready {
			next := ready[(i+1)%len(ready)]
			p := control.NetProbe{ID: ringIDs[i], To: next.dataAddr, Token: s.probeToken(next), Seconds: d.Seconds(), Bytes: netProbeBytes,
				After: starIDs[i], AfterSeconds: (d + 2*time.Second).Seconds()}
			if err := n.conn.Send(control.Message{Type: control.MsgNetProbe, NetProbe: &p}); err != nil {
				w.report(control.NetResult{ID: ringIDs[i], Error: err.Error()})
			}
		}
	}

	// The star: the source to every node at once. What the nodes
	// acknowledge after the first quarter (TCP's start, a shaper's burst)
	// and an eighth after the last stream started, until the earliest a
	// stream can end, is counted on the source's one clock.
	var wg sync.WaitGroup
	began := time.Now()
	sent := probe.NewWindow(began.Add(d/4), began.Add(d), d/8)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		sent.Watch(ctx)
	}()
	connects := make([]time.Duration, len(ready))
	for i, n := range ready {
		wg.Add(1)
		go func(id uint64) {
			defer wg.Done()
			if err := s.sendProbe(ctx, control.Peer{Name: n.name, Addr: n.dataAddr, Token: s.probeToken(n)}, id, d, len(ready), sent, &connects[i]); err != nil {
				w.report(control.NetResult{ID: id, Error: err.Error()})
			}
		}(starIDs[i])
	}
	wg.Wait()
	f.connect = slices.Max(append(connects, 0))
	<-watched
	f.starSent = sent.Rate()
	got := w.wait(ctx, starIDs, time.Now().Add(d+2*time.Second))
	var failed []string
	for i, n := range ready {
		r, ok := got[starIDs[i]]
		switch {
		case !ok:
			failed = append(failed, n.name+": no report")
		case r.Error != "":
			failed = append(failed, n.name+": "+r.Error)
		default:
			f.star[n.name] = r.Rate
		}
	}

	// The ring: every node to the next at once, the last to the first.
	if ring {
		got := w.wait(ctx, ringIDs, time.Now().Add(d+3*time.Second))
		// Each probe's report comes from the node it was sent to: the
		// next one's.
		results := make([]control.NetResult, len(ready))
		for i := range ready {
			results[(i+1)%len(ready)] = got[ringIDs[i]]
		}
		f.ringMachine, f.ringBusy = machineRing(ready, results)
		f.busyShares = busyShares(ready, results)
		for i, n := range ready {
			next := ready[(i+1)%len(ready)]
			r, ok := got[ringIDs[i]]
			switch {
			case !ok:
				failed = append(failed, fmt.Sprintf("%s to %s: no report", n.name, next.name))
			case r.Error != "":
				failed = append(failed, fmt.Sprintf("%s to %s: %s", n.name, next.name, r.Error))
			default:
				f.ringUp[n.name], f.ringIn[next.name] = r.Rate, r.Rate
				if r.CPU > 0 && r.Bytes >= ringCPUBytes {
					f.ringCPU[next.name] = r.CPU / float64(r.Bytes)
				}
			}
		}
	}
	s.log.Debug("bandwidth probes", "star", f.star, "star_sent", f.starSent, "ring_up", f.ringUp)
	f.settle(ready)
	f.took = time.Since(start)
	if len(failed) > 0 {
		slices.Sort(failed)
		notes = append(notes, "bandwidth probes failed: "+listNames(failed))
	}
	return f, notes
}

// starInFlight bounds the bytes the star's streams hold in flight in all:
// more than a LAN's bandwidth-delay product up to 10 Gbit/s. Left to
// itself, each stream would grow its send buffer to hundreds of kilobytes,
// and what the source's NIC and switch then still hold when the star stops
// (0.45 s of data to 24 nodes at 100 Mbit/s) would flow on into the ring
// and take from the links it measures.
const starInFlight = 1 << 20

// starSendBuffer is each stream's send buffer when the star sends to n
// nodes at once.
func starSendBuffer(n int) int {
	return max(starInFlight/max(n, 1), 16<<10)
}

// starChunk is what each of the star's n streams writes at a time: an
// eighth of its send buffer, so that writes end often as the link carries
// the stream, not once a buffer's worth has gone.
func starChunk(n int) int {
	return min(max(starSendBuffer(n)/8, 4<<10), 256<<10)
}

// sendProbe sends one bandwidth probe from the source to addr, one of n
// that go at once, counting its writes in sent.
//
// connected says how long connecting and opening the stream took.
func (s *Server) sendProbe(ctx context.Context, to control.Peer, id uint64, d time.Duration, n int, sent *probe.Window, connected *time.Duration) error {
	start := time.Now()
	c, err := dial.Data(ctx, to.Addr, time.Now().Add(d+time.Second))
	if err != nil {
		return fmt.Errorf("dolly-server cannot connect to it at %s: %w", to.Addr, err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(starSendBuffer(n))
	}
	if err := stream.OpenProbe(c, id, s.frameKey(), to.Token); err != nil {
		return err
	}
	*connected = time.Since(start)
	_, err = probe.SendCounted(ctx, c, d, netProbeBytes, starChunk(n), sent)
	return err
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

// awaitNetResults routes the nodes' net-results to a new waiter until
// release.
func (s *Server) awaitNetResults() (w *netWaiter, release func()) {
	w = newNetWaiter()
	s.mu.Lock()
	s.netResults = w
	s.mu.Unlock()
	return w, func() {
		s.mu.Lock()
		s.netResults = nil
		s.mu.Unlock()
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
