package relay

import (
	"io"
	"testing"
)

// A paced child that takes nothing until the others have everything does
// not hold them back, and then gets every byte from its spool: more than
// the history, the pipes and the socket buffers could hold for it.
func TestPacedChildHoldsNoOneBack(t *testing.T) {
	data := randomBytes(historySize+(24<<20)+7, 21)
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
