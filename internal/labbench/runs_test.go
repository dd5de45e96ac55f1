package main

import (
	"slices"
	"testing"
)

func TestMedianCast(t *testing.T) {
	cast := func(mbps, seconds float64) result { return result{measured: mbps, seconds: seconds} }
	tests := []struct {
		name        string
		casts       []result
		wantMBps    float64
		wantSeconds float64
	}{
		{"one", []result{cast(20, 12)}, 20, 12},
		{"three in order", []result{cast(19, 13), cast(20, 12), cast(21, 11)}, 20, 12},
		{"three shuffled", []result{cast(21, 11), cast(19, 13), cast(20, 12)}, 20, 12},
		{"two: the slower", []result{cast(22, 10), cast(18, 14)}, 18, 14},
		{"ties keep their order", []result{cast(20, 12), cast(20, 12.5), cast(25, 9)}, 20, 12.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := medianCast(tt.casts)
			if got.measured != tt.wantMBps || got.seconds != tt.wantSeconds {
				t.Errorf("median = %.1f MB/s in %.1fs, want %.1f in %.1fs", got.measured, got.seconds, tt.wantMBps, tt.wantSeconds)
			}
			var want []float64
			for _, c := range tt.casts {
				want = append(want, c.measured)
			}
			if !slices.Equal(got.casts, want) {
				t.Errorf("casts = %v, want every cast's rate in order %v", got.casts, want)
			}
		})
	}
}
