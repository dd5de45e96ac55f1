package relay

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// A paced child that takes nothing until the others have everything does
// not hold them back, and then gets every byte from its spool: more than
// the history, the pipes and the socket buffers could hold for it.
func TestPacedChildHoldsNoOneBack(t *testing.T) {
	data := randomBytes(HistoryBytes+(24<<20)+7, 21)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelayWith(t, Config{NoSplice: noSplice, SpoolDir: t.TempDir()}, len(data))
			fast, _ := h.child("fast", 0)
			a, b := tcpPair(t)
			gate := make(chan struct{})
			slow := make(chan []byte, 1)
			go func() {
				<-gate
				all, _ := io.ReadAll(b)
				slow <- all
			}()
			if err := h.r.AttachPaced(h.ctx, "slow", a, 0); err != nil {
				t.Fatal(err)
			}
			up, _ := h.upstream()
			go func() { writeUneven(up, data, 22); up.CloseWrite() }()
			expect(t, "the fast child", fast, data)
			expect(t, "the local copy", h.local, data)
			close(gate)
			expect(t, "the paced child", slow, data)
			h.wait()
		})
	}
}

// A paced child attached behind the stream gets what it lacks from the
// history, through its spool.
func TestPacedChildCatchesUpFromHistory(t *testing.T) {
	data := randomBytes(20<<20, 23)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelayWith(t, Config{NoSplice: noSplice, SpoolDir: t.TempDir()}, len(data))
			up, _ := h.upstream()
			first := 9 << 20
			up.Write(data[:first])
			if err := h.r.hist.waitEnd(int64(first)); err != nil {
				t.Fatal(err)
			}
			a, b := tcpPair(t)
			got := make(chan []byte, 1)
			go func() {
				all, _ := io.ReadAll(b)
				got <- all
			}()
			if err := h.r.AttachPaced(h.ctx, "behind", a, 3<<20); err != nil {
				t.Fatal(err)
			}
			go func() { writeUneven(up, data[first:], 24); up.CloseWrite() }()
			h.wait()
			expect(t, "the paced child", got, data[3<<20:])
		})
	}
}

// A paced child that dies is dropped; the others go on.
func TestRelayOutlivesADeadPacedChild(t *testing.T) {
	data := randomBytes(40<<20, 25)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelayWith(t, Config{NoSplice: noSplice, SpoolDir: t.TempDir()}, len(data))
			good, _ := h.child("good", 0)
			a, b := tcpPair(t)
			if err := h.r.AttachPaced(h.ctx, "bad", a, 0); err != nil {
				t.Fatal(err)
			}
			b.Close()
			up, _ := h.upstream()
			go func() { up.Write(data); up.CloseWrite() }()
			h.wait()
			expect(t, "the surviving child", good, data)
			expect(t, "the local copy", h.local, data)
		})
	}
}

func TestMostHeld(t *testing.T) {
	s := time.Second
	tests := []struct {
		name          string
		before, after map[string]time.Duration
		least         time.Duration
		want          string
	}{
		{"none waited for", map[string]time.Duration{"a": s}, map[string]time.Duration{"a": s}, s / 2, ""},
		{"one, long enough", map[string]time.Duration{"a": s}, map[string]time.Duration{"a": 2 * s, "b": s / 10}, s / 2, "a"},
		{"one, too short", map[string]time.Duration{}, map[string]time.Duration{"a": s / 4}, s / 2, ""},
		{"the longer of two", map[string]time.Duration{"a": 0, "b": s}, map[string]time.Duration{"a": 3 * s / 4, "b": 2 * s}, s / 2, "b"},
		{"a new child", nil, map[string]time.Duration{"c": s}, s / 2, "c"},
	}
	for _, tt := range tests {
		if got := MostHeld(tt.before, tt.after, tt.least); got != tt.want {
			t.Errorf("%s: MostHeld = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A child that takes nothing holds the relay back, and Held says so.
func TestHeldNamesTheChildThatHoldsBack(t *testing.T) {
	data := randomBytes(HistoryBytes+(16<<20), 27)
	h := startRelay(t, false, len(data))
	eager, _ := h.child("eager", 0)
	a, b := tcpPair(t)
	gate := make(chan struct{})
	lazy := make(chan []byte, 1)
	go func() {
		<-gate
		all, _ := io.ReadAll(b)
		lazy <- all
	}()
	if err := h.r.Attach(h.ctx, "lazy", a, 0); err != nil {
		t.Fatal(err)
	}
	up, _ := h.upstream()
	go func() { up.Write(data); up.CloseWrite() }()
	deadline := time.Now().Add(time.Minute)
	for h.r.Held()["lazy"] < 100*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("Held = %v after a minute of a child that takes nothing", h.r.Held())
		}
		time.Sleep(10 * time.Millisecond) // polling: there is nothing to wait on
	}
	if held := h.r.Held(); held["eager"] >= held["lazy"] {
		t.Errorf("Held = %v: the eager child held the relay back as long as the lazy one", held)
	}
	close(gate)
	expect(t, "the eager child", eager, data)
	expect(t, "the lazy child", lazy, data)
	h.wait()
}

// A paced child that lags more than the spool holds is dropped, and said
// lost: the others go on.
func TestPacedChildPastTheSpoolIsLost(t *testing.T) {
	data := randomBytes(HistoryBytes+(16<<20), 29)
	for mode, noSplice := range modes() {
		t.Run(mode, func(t *testing.T) {
			h := startRelayWith(t, Config{NoSplice: noSplice, SpoolDir: t.TempDir(), SpoolLimit: 4 << 20}, len(data))
			good, _ := h.child("good", 0)
			a, _ := tcpPair(t) // its other end never reads
			if err := h.r.AttachPaced(h.ctx, "laggard", a, 0); err != nil {
				t.Fatal(err)
			}
			up, _ := h.upstream()
			go func() { up.Write(data); up.CloseWrite() }()
			expect(t, "the other child", good, data)
			expect(t, "the local copy", h.local, data)
			select {
			case ev := <-h.r.Events():
				if ev.Kind != ChildLost || ev.Name != "laggard" || !strings.Contains(fmt.Sprint(ev.Err), "spool full") {
					t.Fatalf("event %+v, want laggard lost to a full spool", ev)
				}
			case <-time.After(time.Minute):
				t.Fatal("no event for the laggard")
			}
			h.wait()
		})
	}
}
