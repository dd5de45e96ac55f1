package node

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/dolly/relay"
)

// A probe ordered to follow another starts when that one has ended here,
// whether the order came before the end or after it.
func TestProbesReceived(t *testing.T) {
	var p probesReceived
	waiting := p.done(1)
	select {
	case <-waiting:
		t.Fatal("probe 1 ended before anything was received")
	default:
	}
	p.end(1)
	select {
	case <-waiting:
	default:
		t.Fatal("an order that came first did not see probe 1 end")
	}
	p.end(1) // a second end is harmless
	p.end(2)
	select {
	case <-p.done(2):
	default:
		t.Fatal("an order that came after probe 2 ended waits for it")
	}
	select {
	case <-p.done(3):
		t.Fatal("probe 3 counts as ended, but never came")
	default:
	}
}

// The crowd probes borrow disjoint parts of the relay's history, one
// probe of a kind at a time, and each part comes back once released.
func TestLendHistory(t *testing.T) {
	n := &node{history: make([]byte, relay.HistoryBytes)}
	relayMem, releaseRelay := n.lendHistory(false)
	diskMem, releaseDisk := n.lendHistory(true)
	if len(relayMem) != probe.CrowdMemory || len(diskMem) != relay.HistoryBytes-probe.CrowdMemory {
		t.Fatalf("lent %d bytes to a relay crowd and %d to a disk crowd, want %d and %d",
			len(relayMem), len(diskMem), probe.CrowdMemory, relay.HistoryBytes-probe.CrowdMemory)
	}
	if &n.history[0] != &relayMem[0] || &n.history[probe.CrowdMemory] != &diskMem[0] {
		t.Fatal("the parts lent are not the history's two parts, side by side")
	}
	if cap(relayMem) > probe.CrowdMemory {
		// An append to it must not write over the disk crowd's part.
		t.Fatal("the relay crowd's part reaches into the disk crowd's")
	}
	for _, disk := range []bool{false, true} {
		if again, _ := n.lendHistory(disk); again != nil {
			t.Errorf("a second crowd (disk %v) borrowed a part on loan already", disk)
		}
	}
	releaseRelay()
	releaseDisk()
	for _, disk := range []bool{false, true} {
		if again, release := n.lendHistory(disk); again == nil {
			t.Errorf("a part given back (disk %v) was not lent again", disk)
		} else {
			release()
		}
	}
}

// A spent relay crowd hands its memory back before it answers: a server
// that doubts the crowd sets one up again at once, and that one borrows
// the same memory rather than fresh pages.
func TestSpentRelayCrowdReturnsItsMemoryFirst(t *testing.T) {
	n, srv, push, ended := setUpCrowdProbe(t, control.CrowdProbe{ID: 1})
	push <- control.CrowdProbe{ID: 1, Go: true, SettleMillis: 10, WindowMillis: 50}
	m, err := srv.Recv(5 * time.Second)
	if err != nil || m.NetResult == nil || m.NetResult.Bytes <= 0 {
		t.Fatalf("pushed: %+v, %v", m.NetResult, err)
	}
	mem, release := n.lendHistory(false)
	if mem == nil {
		t.Fatal("the relay crowd's memory was still on loan when it answered")
	}
	release()
	<-ended
}

// A decoders' crowd answers with the sample's bytes it decoded in the
// window and its decoding thread's CPU time for them, and borrows none of
// the relay's history, which the relay crowd set up beside it takes.
func TestDecodeCrowdAnswersWithItsThreadsTime(t *testing.T) {
	if !threadClock() {
		t.Skip("no thread CPU clock here")
	}
	n, srv, push, ended := setUpCrowdProbe(t, control.CrowdProbe{ID: 2, Decode: true})
	if mem, release := n.lendHistory(false); mem == nil {
		t.Error("the decoders' crowd took the relay crowd's memory")
	} else {
		release()
	}
	push <- control.CrowdProbe{ID: 2, Decode: true, Go: true, SettleMillis: 5, WindowMillis: 40}
	m, err := srv.Recv(5 * time.Second)
	if err != nil || m.NetResult == nil || m.NetResult.Error != "" {
		t.Fatalf("pushed: %+v, %v", m.NetResult, err)
	}
	r := m.NetResult
	// One thread's time over a 40 ms window: no more than the window (a
	// little past it, for the last round), and some of it.
	if r.Bytes <= 0 || !(r.CPU > 0 && r.CPU < 0.5) || r.Rate <= 0 {
		t.Errorf("answer %+v: want bytes decoded, the thread's CPU time in seconds and a rate", r)
	}
	<-ended
}

// threadClock says whether this machine has a thread CPU clock.
func threadClock() bool {
	var has bool
	probe.OnOneThread(func(cpu func() time.Duration) { has = cpu() > 0 })
	return has
}

// setUpCrowdProbe runs a node's crowd probe set up by set, over a pipe to
// a server's end (srv), and waits for its answer that it is set up; push
// takes the server's orders to push, and ended is closed once the probe
// has returned.
func setUpCrowdProbe(t *testing.T, set control.CrowdProbe) (n *node, srv *control.Conn, push chan control.CrowdProbe, ended chan struct{}) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	n = &node{history: relay.NewHistory(), log: slog.New(slog.DiscardHandler)}
	n.ctl = newSession(n, control.NewConn(a))
	srv = control.NewConn(b)
	push = make(chan control.CrowdProbe, 1)
	ended = make(chan struct{})
	go func() {
		defer close(ended)
		n.crowdProbe(context.Background(), set, push)
	}()
	if m, err := srv.Recv(5 * time.Second); err != nil || m.NetResult == nil || m.NetResult.Error != "" {
		t.Fatalf("set up: %+v, %v", m.NetResult, err)
	}
	return n, srv, push, ended
}
