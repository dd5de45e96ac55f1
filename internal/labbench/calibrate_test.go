package main

import (
	"math"
	"strings"
	"testing"
)

// The fit finds the figure and the contention that made two chains cost
// what they did, from the model's split of each chain's coefficient.
func TestFitPair(t *testing.T) {
	// A chain of n: the model counts a(n) besides the figure and b(n)/x
	// for it, per image byte.
	a := func(n int) float64 { return 0.4e-9 + 0.1e-9*float64(n) }
	b := func(n int) float64 { return 1.2 * float64(n) }
	cost := func(n int, x, k float64) castCost {
		return castCost{n: n, perByte: (1 + k*float64(n)) * (a(n) + b(n)/x)}
	}
	tests := []struct {
		name   string
		x, k   float64
		lo, hi int
	}{
		{"no contention", 900e6, 0, 4, 8},
		{"some", 900e6, 0.04, 4, 8},
		{"much", 1500e6, 0.3, 12, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := cost(tt.lo, tt.x, tt.k), cost(tt.hi, tt.x, tt.k)
			x, k, err := fitPair(a(tt.lo), b(tt.lo), a(tt.hi), b(tt.hi), lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(x-tt.x)/tt.x > 1e-6 || math.Abs(k-tt.k) > 1e-6 {
				t.Fatalf("fitted x %.6g, k %.6g; want %.6g, %.6g", x, k, tt.x, tt.k)
			}
		})
	}
}

// A smaller chain that costs more than the larger one's figure predicts
// needs no contention; one that costs too little for any is an error.
func TestFitPairBounds(t *testing.T) {
	a, b := 0.0, 1.0
	lo := castCost{n: 4, perByte: 5e-9}
	hi := castCost{n: 8, perByte: 8e-9} // 1e-9 a node: the chain of 4 costs more
	x, k, err := fitPair(a, 4*b, a, 8*b, lo, hi)
	if err != nil || k != 0 || math.Abs(x-1e9) > 1 {
		t.Fatalf("x %v, k %v, err %v; want 1e9, 0, nil", x, k, err)
	}
	lo.perByte = 0.1e-9
	if _, _, err := fitPair(a, 4*b, a, 8*b, lo, hi); err == nil || !strings.Contains(err.Error(), "too little") {
		t.Fatalf("error %v, want the chain of 4 found too cheap", err)
	}
	if _, err := fitOne(9e-9, 1, 0, hi); err == nil || !strings.Contains(err.Error(), "no more than the model counts") {
		t.Fatalf("error %v, want a cast cheaper than the model's rest refused", err)
	}
}
