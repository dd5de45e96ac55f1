package main

import (
	"errors"
	"maps"
	"math"
	"strings"
	"testing"

	"dolly/capacity"
)

// chainCost is a synthetic model of a chain of n nodes: a(n) per image
// byte besides the figure x, b(n)/x for it, and contention k.
func chainCost(n int, x, k float64) float64 {
	a := 0.4e-9 + 0.1e-9*float64(n)
	b := 1.2 * float64(n)
	return (1 + k*float64(n)) * (a + b/x)
}

// excessOf is the fit's view of a cast: the model's cost less what the
// cast measured.
func excessOf(cost func(n int, x, k float64) float64, c castCost) func(x, k float64) (float64, error) {
	return func(x, k float64) (float64, error) { return cost(c.n, x, k) - c.perByte, nil }
}

// castChain is chainCost without contention and with a cast cost of f
// CPU-s per GB sent, for a stream of 0.35 wire bytes per image byte.
func castChain(n int, x, f float64) float64 { return f*1e-9*0.35 + chainCost(n, x, 0) }

// The pair fit finds the figure and the cast cost that made two chains
// cost what they did.
func TestFitCastPair(t *testing.T) {
	// pieced is a chain that a link holds back on 40% of the image, at a
	// cost of 3e-9 per byte, whatever the figure: the model's rate over
	// pieces, as the cost of all the machine's cores.
	pieced := func(n int, x, f float64) float64 {
		return 0.4*max(castChain(n, x, f), 3e-9) + 0.6*castChain(n, x, f)
	}
	tests := []struct {
		name   string
		cost   func(n int, x, f float64) float64
		x, f   float64
		lo, hi int
	}{
		{"no cast cost", castChain, 900e6, 0, 4, 8},
		{"some", castChain, 900e6, 4, 4, 8},
		{"much", castChain, 1500e6, 30, 12, 24},
		{"pieces, held back by a link in part", pieced, 900e6, 4, 4, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo := castCost{n: tt.lo, perByte: tt.cost(tt.lo, tt.x, tt.f)}
			hi := castCost{n: tt.hi, perByte: tt.cost(tt.hi, tt.x, tt.f)}
			// Start the search from a figure well off, as a probe is.
			x, f, err := fitCastPair(excessOf(tt.cost, lo), excessOf(tt.cost, hi), tt.x/3, lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(x-tt.x)/tt.x > 1e-5 || math.Abs(f-tt.f) > 1e-4*max(tt.f, 1) {
				t.Fatalf("fitted x %.6g, f %.6g; want %.6g, %.6g", x, f, tt.x, tt.f)
			}
		})
	}
}

// A smaller chain that costs no more than its share of the larger one
// needs no cast cost; one that costs too much for any is an error, and so
// is a chain outside what any figure in reach can explain.
func TestFitCastPairBounds(t *testing.T) {
	linear := func(n int, x, f float64) float64 { return f*1e-9 + float64(n)/x }
	lo := castCost{n: 4, perByte: 3e-9}
	hi := castCost{n: 8, perByte: 8e-9} // 1e-9 a node: the chain of 4 costs less
	x, f, err := fitCastPair(excessOf(linear, lo), excessOf(linear, hi), 2e9, lo, hi)
	if err != nil || f != 0 || math.Abs(x-1e9) > 1e3 {
		t.Fatalf("x %v, f %v, err %v; want 1e9, 0, nil", x, f, err)
	}
	lo.perByte = 9e-9 // dearer than the chain of 8
	if _, _, err := fitCastPair(excessOf(linear, lo), excessOf(linear, hi), 1e9, lo, hi); err == nil || !strings.Contains(err.Error(), "too much") {
		t.Fatalf("error %v, want the chain of 4 found too dear", err)
	}
	withRest := func(n int, x, f float64) float64 { return 9e-9 + float64(n)/x }
	if _, err := fitOne(func(x float64) (float64, error) { return excessOf(withRest, hi)(x, 0) }, 1e9, hi); err == nil || !strings.Contains(err.Error(), "less than the model counts") {
		t.Fatalf("error %v, want a cast cheaper than the model's rest refused", err)
	}
	dear := castCost{n: 8, perByte: 1e-3}
	if _, err := fitOne(func(x float64) (float64, error) { return excessOf(linear, dear)(x, 0) }, 1e9, dear); err == nil || !strings.Contains(err.Error(), "more than the model counts") {
		t.Fatalf("error %v, want a cast dearer than any figure in reach refused", err)
	}
}

// With the figure kept, a chain's cost gives the contention; a chain no
// dearer than the model without contention gives none, and one dearer than
// any contention up to 1 explains is an error.
func TestFitContention(t *testing.T) {
	const x = 900e6
	for _, k := range []float64{0.001, 0.013, 0.3} {
		c := castCost{n: 24, perByte: chainCost(24, x, k)}
		got, err := fitContention(func(k float64) (float64, error) { return excessOf(chainCost, c)(x, k) }, c)
		if err != nil || math.Abs(got-k) > 1e-6 {
			t.Errorf("contention %v: fitted %v, %v", k, got, err)
		}
	}
	cheap := castCost{n: 24, perByte: chainCost(24, x, 0) * 0.9}
	if _, err := fitContention(func(k float64) (float64, error) { return excessOf(chainCost, cheap)(x, k) }, cheap); !errors.Is(err, errNoContention) {
		t.Errorf("a chain cheaper than the model without contention: error %v, want errNoContention", err)
	}
	dear := castCost{n: 24, perByte: chainCost(24, x, 1) * 1.5}
	if _, err := fitContention(func(k float64) (float64, error) { return excessOf(chainCost, dear)(x, k) }, dear); err == nil || !strings.Contains(err.Error(), "any contention up to 1") {
		t.Errorf("a chain dearer than any contention explains: error %v", err)
	}
}

func TestMedianRates(t *testing.T) {
	decode := func(q capacity.Probe) map[string]float64 { return q.DecompressBytesPerSec }
	probes := []capacity.Probe{
		{DecompressBytesPerSec: map[string]float64{"zstd": 949e6, "gzip": 300e6}},
		{DecompressBytesPerSec: map[string]float64{"zstd": 1466e6, "gzip": 310e6}},
		{DecompressBytesPerSec: map[string]float64{"zstd": 1100e6, "gzip": 290e6}},
	}
	got := medianRates(probes, decode)
	want := map[string]float64{"zstd": 1100e6, "gzip": 300e6}
	if !maps.Equal(got, want) {
		t.Errorf("medianRates = %v, want %v", got, want)
	}
	if got := medianRates([]capacity.Probe{{}, {}}, decode); got != nil {
		t.Errorf("medianRates of probes without rates = %v, want nil", got)
	}
}
