package server

import "testing"

func TestCrowdedEncodeRate(t *testing.T) {
	tests := []struct {
		rate, slowdown, want float64
	}{
		{300e6, 0, 300e6},   // not timed among the decoders
		{300e6, 1, 300e6},   // as fast as alone
		{300e6, 1.5, 240e6}, // costs 1 and 1.5 a byte: 1.25
		{300e6, 0.5, 400e6}, // faster among them: the mean all the same
		{0, 1.2, 0},         // no figure alone: none counted
	}
	for _, tt := range tests {
		if got := crowdedEncodeRate(tt.rate, tt.slowdown); got != tt.want {
			t.Errorf("crowdedEncodeRate(%.0f, %.2f) = %.0f, want %.0f", tt.rate, tt.slowdown, got, tt.want)
		}
	}
	note := encodeCrowdNote(4, 1.5, 300e6)
	want := "the source's encoder, timed again while 4 nodes of its machine decoded at once, took 1.50× its CPU a byte alone; the model counts the mean of the two costs a byte: the source compresses at 240.0 MB/s a core"
	if note != want {
		t.Errorf("note:\n%s\nwant:\n%s", note, want)
	}
}
