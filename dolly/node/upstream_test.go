package node

import "testing"

// A data connection whose handshake ends late must not displace an
// upstream accepted after it.
func TestUpstreamOrder(t *testing.T) {
	var o upstreamOrder
	var current uint64
	steps := []struct {
		seq  uint64
		want bool
	}{
		{2, true},  // the first to finish its handshake
		{1, false}, // accepted earlier, finished later: stale
		{3, true},  // a newer upstream
		{2, false},
	}
	for _, s := range steps {
		got := o.take(s.seq, func() { current = s.seq })
		if got != s.want {
			t.Fatalf("take(%d) = %v, want %v", s.seq, got, s.want)
		}
	}
	if current != 3 {
		t.Fatalf("upstream is connection %d, want 3", current)
	}
}
