package server

import (
	"context"
	"fmt"
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
