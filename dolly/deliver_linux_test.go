package dolly

import (
	"strings"
	"sync"
	"syscall"
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
			h := startRelayWith(t, noSplice, len(data), (*Relay).Linger)
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
func bytesQueued(t *testing.T, c interface {
	SyscallConn() (syscall.RawConn, error)
}) int {
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
// node up for ever: the relay gives up on it and says so.
func TestRelayGivesUpOnAChildThatStopsReading(t *testing.T) {
	data := randomBytes(1<<20, 13)
	h := startRelayWith(t, false, len(data), func(r *Relay) {
		r.Linger()
		r.deliveryStall = 200 * time.Millisecond
	})
	a, b := tcpPair(t)
	b.SetReadBuffer(32 << 10) // and never read
	a.SetWriteBuffer(4 << 20) // the relay's sends all complete
	if err := h.r.Attach(h.ctx, "stuck", a, 0); err != nil {
		t.Fatal(err)
	}
	up, _ := h.upstream()
	go func() { up.Write(data); up.CloseWrite() }()
	if err := h.r.Drained(h.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-h.r.Events():
		if ev.Kind != ChildLost || ev.Name != "stuck" {
			t.Fatalf("event %+v, want the loss of child stuck", ev)
		}
		if !strings.Contains(errText(ev.Err), "delivering the end of the stream") {
			t.Fatalf("event error %q, want one about delivering the end", ev.Err)
		}
	default:
		t.Fatal("no event for the child that stopped reading")
	}
}
