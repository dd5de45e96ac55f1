package relay

import (
	"testing"
	"time"

	"dolly/capacity"
)

type fakeUpstream struct{ Upstream }

func TestWakeSizeFollowsTheRate(t *testing.T) {
	const round = 256 << 10
	a, b := &fakeUpstream{}, &fakeUpstream{}
	t0 := time.Unix(1000, 0)
	type step struct {
		up      Upstream
		moved   int           // bytes moved before the call
		after   time.Duration // since t0
		want    int
		changed bool
		flush   bool // the read before waited past flushAfter
	}
	tests := []struct {
		name  string
		delay time.Duration
		steps []step
	}{
		{"a new upstream starts small", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
		}},
		{"within a window nothing changes", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 10 << 20, after: rateWindow / 2, want: minWake},
		}},
		{"100 Mbit/s: 4 ms of 12.5 MB/s", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 625_000, after: rateWindow, want: 50_000, changed: true},
		}},
		{"fast links get a whole round", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 50 << 20, after: rateWindow, want: round, changed: true},
		}},
		{"a slow or idle upstream gets the least", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 50 << 20, after: rateWindow, want: round, changed: true},
			{up: a, moved: 0, after: 2 * rateWindow, want: minWake, changed: true},
		}},
		{"a small change costs no syscall", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 625_000, after: rateWindow, want: 50_000, changed: true},
			{up: a, moved: 690_000, after: 2 * rateWindow, want: 50_000},
		}},
		{"a new upstream starts again", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 50 << 20, after: rateWindow, want: round, changed: true},
			{up: b, after: rateWindow + time.Millisecond, want: minWake, changed: true},
		}},
		{"a paused upstream starts again small", 0, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 50 << 20, after: rateWindow, want: round, changed: true},
			{up: a, flush: true, moved: 1000, after: rateWindow + 20*time.Millisecond, want: minWake, changed: true},
			{up: a, moved: 50 << 20, after: 2*rateWindow + 20*time.Millisecond, want: round, changed: true},
		}},
		{"a crowded machine: 12 ms of 12.5 MB/s", CrowdedWakeDelay, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 625_000, after: rateWindow, want: 150_000, changed: true},
		}},
		{"a crowded machine keeps its delay for a new upstream", CrowdedWakeDelay, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: b, after: time.Millisecond, want: minWake, changed: true},
			{up: b, moved: 625_000, after: rateWindow + time.Millisecond, want: 150_000, changed: true},
		}},
		{"a crowded machine's fast links still get a round", CrowdedWakeDelay, []step{
			{up: a, after: 0, want: minWake, changed: true},
			{up: a, moved: 50 << 20, after: rateWindow, want: round, changed: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := wakeSize{delay: tt.delay}
			for i, s := range tt.steps {
				w.moved(s.moved)
				if s.flush {
					w.flush()
				}
				got, changed := w.next(s.up, round, t0.Add(s.after))
				if got != s.want || changed != s.changed {
					t.Fatalf("step %d: got %d (changed %v), want %d (changed %v)", i, got, changed, s.want, s.changed)
				}
			}
		})
	}
}

// TestWakeIsTheModels: the capacity model counts a chain's hops by the
// relays' wake-ups; it must count the ones they take.
func TestWakeIsTheModels(t *testing.T) {
	if wakeDelay != capacity.RelayWake || CrowdedWakeDelay != capacity.CrowdedRelayWake || minWake != capacity.RelayMinBatch {
		t.Errorf("the relay wakes after %v (%v crowded) for at least %d bytes; the model counts %v (%v), %d",
			wakeDelay, CrowdedWakeDelay, minWake, capacity.RelayWake, capacity.CrowdedRelayWake, capacity.RelayMinBatch)
	}
}
