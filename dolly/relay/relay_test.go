package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-done
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// relayHarness runs a relay with a TCP upstream the test writes to.
type relayHarness struct {
	t     *testing.T
	r     *Relay
	ctx   context.Context
	done  chan error
	local chan []byte // what the node's reader got, up to want bytes
}

func startRelay(t *testing.T, noSplice bool, want int) *relayHarness {
	t.Helper()
	return startRelayWith(t, Config{NoSplice: noSplice}, want)
}

// startRelayWith runs a relay made with cfg.
func startRelayWith(t *testing.T, cfg Config, want int) *relayHarness {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	h := &relayHarness{t: t, r: r, ctx: ctx, done: make(chan error, 1), local: make(chan []byte, 1)}
	go func() { h.done <- r.Run(ctx) }()
	go func() {
		b := make([]byte, want)
		_, err := io.ReadFull(r.Reader(), b)
		if err != nil {
			t.Error(err)
		}
		r.EndSeen() // the test's stream has no frames: reading it all is its end
		h.local <- b
	}()
	return h
}

// upstream connects a new upstream and returns its writing end and the
// position the relay asked for.
func (h *relayHarness) upstream() (*net.TCPConn, int64) {
	w, rd := tcpPair(h.t)
	pos, err := h.r.SetUpstream(h.ctx, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	return w, pos
}

// child attaches a child from position from and returns a channel that
// yields everything the child receives.
func (h *relayHarness) child(name string, from int64) (chan []byte, *net.TCPConn) {
	a, b := tcpPair(h.t)
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(b)
		got <- all
	}()
	if err := h.r.Attach(h.ctx, name, a, from); err != nil {
		h.t.Fatal(err)
	}
	return got, b
}

func (h *relayHarness) wait() {
	h.t.Helper()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Fatal(err)
		}
	case <-time.After(time.Minute):
		h.t.Fatal("the relay did not finish")
	}
}

func expect(t *testing.T, what string, c chan []byte, want []byte) {
	t.Helper()
	select {
	case got := <-c:
		if !bytes.Equal(got, want) {
			t.Fatalf("%s got %d bytes (sha %x), want %d (sha %x)", what, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s never finished", what)
	}
}

// writeUneven writes p in pieces of random sizes, as the network delivers.
func writeUneven(c io.Writer, p []byte, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 2))
	for len(p) > 0 {
		k := min(len(p), 1+rnd.IntN(3<<20))
		c.Write(p[:k])
		p = p[k:]
	}
}

func modes() map[string]bool { return map[string]bool{"splice": false, "copy": true} }

func TestRelayForwardsVerbatim(t *testing.T) {
	data := randomBytes(23<<20+11, 1)
	for mode, noSplice := range modes() {
		for _, kids := range []int{0, 1, 3} {
			t.Run(mode+"/"+string(rune('0'+kids)), func(t *testing.T) {
				h := startRelay(t, noSplice, len(data))
				var got []chan []byte
				for i := range kids {
					c, _ := h.child(string(rune('a'+i)), 0)
					got = append(got, c)
				}
				up, pos := h.upstream()
				if pos != 0 {
					t.Fatalf("a fresh relay asked for position %d", pos)
				}
				go func() { writeUneven(up, data, 2); up.CloseWrite() }()
				h.wait()
				for i, c := range got {
					expect(t, "child "+string(rune('a'+i)), c, data)
				}
				expect(t, "the local copy", h.local, data)
				if h.r.Pos() != int64(len(data)) {
					t.Fatalf("Pos = %d, want %d", h.r.Pos(), len(data))
				}
			})
		}
	}
}

func TestRelayShortTee(t *testing.T) {
	data := randomBytes(9<<20, 5)
	h := startRelay(t, false, len(data))
	h.r.teeLimit = 1000
	a, _ := h.child("a", 0)
	b, _ := h.child("b", 0)
	up, _ := h.upstream()
	go func() { writeUneven(up, data, 3); up.CloseWrite() }()
	h.wait()
	expect(t, "child a", a, data)
	expect(t, "child b", b, data)
	expect(t, "the local copy", h.local, data)
}

func TestRelayOutlivesADeadChild(t *testing.T) {
	data := randomBytes(40<<20, 4)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelay(t, noSplice, len(data))
			good, _ := h.child("good", 0)
			_, badEnd := h.child("bad", 0)
			badEnd.Close() // the child dies before reading anything
			up, _ := h.upstream()
			go func() { up.Write(data); up.CloseWrite() }()
			h.wait()
			expect(t, "the surviving child", good, data)
			expect(t, "the local copy", h.local, data)
			select {
			case ev := <-h.r.Events():
				if ev.Kind != ChildLost || ev.Name != "bad" {
					t.Fatalf("event %+v, want the loss of child bad", ev)
				}
			default:
				t.Fatal("no event for the dead child")
			}
		})
	}
}

// When the upstream dies mid-stream, a new one takes over from the byte
// the relay had reached, and nobody downstream notices but a pause.
func TestRelayResumesWithANewUpstream(t *testing.T) {
	data := randomBytes(12<<20+5, 6)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelay(t, noSplice, len(data))
			kid, _ := h.child("kid", 0)
			up, _ := h.upstream()
			cut := 5<<20 + 123
			up.Write(data[:cut])
			up.Close() // dies without the end of the stream
			var ev Event
			select {
			case ev = <-h.r.Events():
			case <-time.After(30 * time.Second):
				t.Fatal("the relay did not notice its upstream died")
			}
			if ev.Kind != UpstreamLost || ev.Pos != int64(cut) {
				t.Fatalf("event %+v, want upstream lost at %d", ev, cut)
			}
			up2, pos := h.upstream()
			if pos != int64(cut) {
				t.Fatalf("the relay asked the new upstream for %d, want %d", pos, cut)
			}
			go func() { writeUneven(up2, data[pos:], 7); up2.CloseWrite() }()
			h.wait()
			expect(t, "the child", kid, data)
			expect(t, "the local copy", h.local, data)
		})
	}
}

// A child that lost its own upstream is attached here from the byte it
// had: the bytes it lacks come from the history, then the live stream.
// One that is ahead has what it has skipped.
func TestRelayServesLateChildrenFromHistory(t *testing.T) {
	data := randomBytes(20<<20, 8)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelay(t, noSplice, len(data))
			up, _ := h.upstream()
			first := 9 << 20
			up.Write(data[:first])
			// Wait until the relay has passed on the first part.
			if err := h.r.hist.waitEnd(int64(first)); err != nil {
				t.Fatal(err)
			}
			behind, _ := h.child("behind", 2<<20)
			ahead, _ := h.child("ahead", int64(first)+1000)
			go func() { writeUneven(up, data[first:], 9); up.CloseWrite() }()
			h.wait()
			expect(t, "the child behind", behind, data[2<<20:])
			expect(t, "the child ahead", ahead, data[first+1000:])
		})
	}
}

// An upstream that pauses with fewer bytes sent than the relay's batch
// (a source waiting for a slow child, a re-plan) must not have them held
// back until it sends more: the child and the local copy get them now.
func TestRelayPassesOnAShortBatchWhenTheUpstreamPauses(t *testing.T) {
	data := randomBytes(minWake/3, 12)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelay(t, noSplice, len(data))
			kid, kidEnd := tcpPair(t)
			if err := h.r.Attach(h.ctx, "kid", kid, 0); err != nil {
				t.Fatal(err)
			}
			up, _ := h.upstream()
			up.Write(data) // and nothing more until the bytes are through
			passed := make(chan error, 1)
			go func() { passed <- h.r.hist.waitEnd(int64(len(data))) }()
			select {
			case err := <-passed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the relay held %d bytes while its upstream paused", len(data))
			}
			got := make([]byte, len(data))
			kidEnd.SetReadDeadline(time.Now().Add(20 * time.Second))
			if n, err := io.ReadFull(kidEnd, got); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the child got %d bytes (%v) while the upstream paused, want all %d", n, err, len(data))
			}
			up.CloseWrite()
			h.wait()
			expect(t, "the local copy", h.local, data)
		})
	}
}

func TestRelayRefusesWhatItNoLongerHolds(t *testing.T) {
	data := randomBytes(HistoryBytes+(8<<20), 11)
	h := startRelay(t, false, len(data))
	up, _ := h.upstream()
	go func() { up.Write(data); up.CloseWrite() }()
	if err := h.r.hist.waitEnd(int64(len(data))); err != nil {
		t.Fatal(err)
	}
	a, _ := tcpPair(t)
	if err := h.r.Attach(h.ctx, "late", a, 0); err == nil {
		t.Fatal("a child was attached from byte 0 after 40 MiB through a 32 MiB history")
	}
	h.wait()
}

// A relay whose upstream sends nothing (it is dead, but no one has said so
// yet) must still take requests at once: this is when a child's new
// upstream is set. Many requests in a row give a wake-up that comes just
// before its request every chance to be lost.
func TestRelayTakesRequestsWhileUpstreamIsSilent(t *testing.T) {
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelay(t, noSplice, 1)
			up, _ := h.upstream() // connected, and silent until the end
			ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
			defer cancel()
			for i := range 2000 {
				if _, err := h.r.request(ctx, relayRequest{kind: reqNames}); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			up.Write([]byte{1})
			up.CloseWrite()
			h.wait()
		})
	}
}

// A relay whose upstream sends nothing counts the wait as starved: what
// the server tells a starved node from a slow one by.
func TestRelayCountsTheWaitForItsUpstream(t *testing.T) {
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelay(t, noSplice, 1)
			start := time.Now()
			up, _ := h.upstream()
			const silent = 300 * time.Millisecond
			time.Sleep(silent) // the upstream's silence, which is what is measured
			got := h.r.Starved()
			if elapsed := time.Since(start); got < silent/2 || got > elapsed {
				t.Errorf("starved %v over %v of an upstream's silence, want at least half of %v", got, elapsed, silent)
			}
			up.Write([]byte{1})
			up.CloseWrite()
			h.wait()
		})
	}
}

// Observe sees every stream byte once, in order, and before the node's
// reader can have it: through splice and copies, a short tee and a new
// upstream after the first died.
func TestRelayObservesEveryByteBeforeTheReader(t *testing.T) {
	data := randomBytes(11<<20+3, 9)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			var seen bytes.Buffer
			var observed atomic.Int64
			r, err := New(Config{NoSplice: noSplice, Observe: func(p []byte) {
				seen.Write(p)
				observed.Add(int64(len(p)))
			}})
			if err != nil {
				t.Fatal(err)
			}
			r.teeLimit = 1000
			h := &relayHarness{t: t, r: r, ctx: t.Context(), done: make(chan error, 1)}
			go func() { h.done <- r.Run(h.ctx) }()
			early := make(chan string, 1)
			go func() {
				b := make([]byte, 64<<10)
				var got int64
				for got < int64(len(data)) {
					n, err := r.Reader().Read(b)
					if got += int64(n); observed.Load() < got {
						early <- fmt.Sprintf("the reader had %d bytes, Observe only %d", got, observed.Load())
						return
					}
					if err != nil {
						early <- err.Error()
						return
					}
				}
				r.EndSeen()
				early <- ""
			}()
			kid, _ := h.child("kid", 0)
			up, _ := h.upstream()
			cut := 4<<20 + 77
			up.Write(data[:cut])
			up.Close()
			<-h.r.Events()
			up2, pos := h.upstream()
			go func() { writeUneven(up2, data[pos:], 4); up2.CloseWrite() }()
			if msg := <-early; msg != "" {
				t.Fatal(msg)
			}
			h.wait()
			expect(t, "the child", kid, data)
			if !bytes.Equal(seen.Bytes(), data) {
				t.Fatalf("Observe saw %d bytes, not the stream's %d", seen.Len(), len(data))
			}
		})
	}
}
