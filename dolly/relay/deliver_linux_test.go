package relay

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A node leaves, and a netbooted one powers off, once its relay is
// drained: by then each child's kernel must hold the whole stream, not
// this host's send queue.
func TestRelayDrainedMeansDelivered(t *testing.T) {
	data := randomBytes(8<<20, 12)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelayWith(t, Config{NoSplice: noSplice, ServeLate: true}, len(data))
			a, b := tcpPair(t)
			b.SetReadBuffer(32 << 10)
			var mu sync.Mutex // held while the child reads
			read := 0
			ended := make(chan struct{})
			go func() { // a child that reads slowly, as one with a slow disk does
				defer close(ended)
				buf := make([]byte, 16<<10)
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					mu.Lock()
					n, err := b.Read(buf)
					read += n
					mu.Unlock()
					if err != nil {
						return
					}
					<-tick.C
				}
			}()
			if err := h.r.Attach(h.ctx, "slow", a, 0); err != nil {
				t.Fatal(err)
			}
			up, _ := h.upstream()
			go func() { up.Write(data); up.CloseWrite() }()
			if err := h.r.Drained(h.ctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			queued := bytesQueued(t, b)
			got := read + queued
			mu.Unlock()
			if got != len(data) {
				t.Fatalf("when the relay was drained the child had %d of %d bytes (%d read, %d in its kernel); the rest was still on the sending host", got, len(data), got-queued, queued)
			}
			<-ended
		})
	}
}

// bytesQueued is how many received bytes c's kernel holds unread.
func bytesQueued(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

// A child that stops reading before the end does not keep its upstream's
// node up for ever: the relay waits for it as long as it acknowledges
// something, then lets the node go.
func TestRelayGivesUpOnAChildThatStopsReading(t *testing.T) {
	const stall = 200 * time.Millisecond
	// Less than any send buffer holds, so that every send completes and
	// only the acknowledgement is missing.
	data := randomBytes(128<<10, 13)
	h := startRelayWith(t, Config{ServeLate: true, DeliveryStall: stall}, len(data))
	a, b := tcpPair(t)
	b.SetReadBuffer(16 << 10) // and never read
	if err := h.r.Attach(h.ctx, "stuck", a, 0); err != nil {
		t.Fatal(err)
	}
	up, _ := h.upstream()
	began := time.Now()
	go func() { up.Write(data); up.CloseWrite() }()
	if err := h.r.Drained(h.ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < stall {
		t.Fatalf("drained after %v: the relay did not wait for the child's acknowledgement", took)
	}
	if queued := bytesQueued(t, b); queued >= len(data) {
		t.Fatalf("the child's kernel holds all %d bytes: the test did not leave any unacknowledged", queued)
	}
}

// The server detaches a child that went away: that cuts the relay's wait
// for its acknowledgement short, rather than after the stall time.
func TestRelayDetachCutsTheWaitForDelivery(t *testing.T) {
	data := randomBytes(128<<10, 14)
	h := startRelayWith(t, Config{ServeLate: true}, len(data)) // waits up to 30 s
	a, b := tcpPair(t)
	b.SetReadBuffer(16 << 10) // and never read
	if err := h.r.Attach(h.ctx, "gone", a, 0); err != nil {
		t.Fatal(err)
	}
	up, _ := h.upstream()
	go func() { up.Write(data); up.CloseWrite() }()
	// Wait until the relay has sent the end and waits for the child.
	deadline := time.Now().Add(10 * time.Second)
	for tcpState(t, a) != unix.BPF_TCP_FIN_WAIT1 {
		if time.Now().After(deadline) {
			t.Fatalf("the relay never half-closed its child (TCP state %d)", tcpState(t, a))
		}
		time.Sleep(time.Millisecond) // polling the socket: there is nothing to wait on
	}
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	if err := h.r.Detach(ctx, "gone"); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := h.r.Drained(ctx); err != nil {
		t.Fatalf("Drained after Detach: %v", err)
	}
}

// tcpState is the TCP state of c's socket (unix.BPF_TCP_*), or -1 once it
// is closed.
func tcpState(t *testing.T, c *net.TCPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	state := -1
	rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO); err == nil {
			state = int(info.State)
		}
	})
	return state
}
