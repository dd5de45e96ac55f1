package probe

import (
	"io"
	"testing"
	"time"
)

// slowWriter takes a millisecond for every write.
type slowWriter struct{ writes int }

func (w *slowWriter) Write(p []byte) (int, error) {
	w.writes++
	time.Sleep(time.Millisecond)
	return len(p), nil
}

// A send writes for its budget, on to 64 MiB on a fast path, but no longer
// than twice its budget on a slow one.
func TestSendStopsAtTwiceItsBudget(t *testing.T) {
	buf := make([]byte, 64<<10)
	if sent, err := send(io.Discard, buf, time.Millisecond); err != nil || sent < 64<<20 {
		t.Errorf("a fast path sent %d bytes (%v), want 64 MiB at least", sent, err)
	}
	w := &slowWriter{}
	const budget = 20 * time.Millisecond
	start := time.Now()
	sent, err := send(w, buf, budget)
	if took := time.Since(start); err != nil || took < budget {
		t.Fatalf("a slow path sent for %v (%v), want its budget of %v at least", took, err, budget)
	}
	// At a millisecond a write, 64 MiB would take a second; twice the
	// budget is 40 writes at most.
	if sent >= 64<<20 || w.writes > 40 {
		t.Errorf("a slow path sent %d bytes in %d writes, want it stopped at twice its budget", sent, w.writes)
	}
}
