//go:build linux

package relay

import (
	"io"
	"testing"
)

// A child whose socket takes only a few KiB at a time is sent every round
// in many parts, the relay holding its rounds in the child's pipe
// meanwhile; a child attached mid-stream is sent its catch-up from the
// history before the rounds that arrive after it. Both must get the stream
// byte for byte, and so must the local copy.
func TestRelayKeepsOrderThroughASmallSocketBuffer(t *testing.T) {
	data := randomBytes(6<<20+7, 9)
	h := startRelay(t, false, len(data))

	tight, tightEnd := tcpPair(t)
	// The kernel doubles this and keeps a floor of a few KiB: far below
	// any round.
	if err := tight.SetWriteBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	tightGot := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(tightEnd)
		tightGot <- all
	}()
	if err := h.r.Attach(h.ctx, "tight", tight, 0); err != nil {
		t.Fatal(err)
	}

	up, _ := h.upstream()
	half := len(data) / 2
	writeUneven(up, data[:half], 4)
	late, _ := h.child("late", 0) // from the start: a catch-up first
	go func() { writeUneven(up, data[half:], 5); up.CloseWrite() }()
	h.wait()
	expect(t, "the child with a small socket buffer", tightGot, data)
	expect(t, "the child attached mid-stream", late, data)
	expect(t, "the local copy", h.local, data)
}
