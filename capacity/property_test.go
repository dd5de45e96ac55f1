package capacity

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/quick"
)

// TestSolveAddingAConstraintNeverRaisesRate: b is a minimum, so one more
// inequality can only keep or lower it.
func TestSolveAddingAConstraintNeverRaisesRate(t *testing.T) {
	property := func(coefs, caps []uint16, extraCoef, extraCap uint16) bool {
		var cs []Constraint
		for i := range min(len(coefs), len(caps)) {
			cs = append(cs, Constraint{Coef: float64(coefs[i]), Cap: float64(caps[i])})
		}
		before, _ := Solve(cs)
		after, binding := Solve(append(cs, Constraint{Coef: float64(extraCoef), Cap: float64(extraCap)}))
		for _, c := range binding {
			if !near(c.Bound(), after) {
				return false
			}
		}
		return after <= before
	}
	if err := quick.Check(property, nil); err != nil {
		t.Error(err)
	}
}

// randomResources draws a host of one of the three models with figures
// around those of real machines.
func randomResources(rng *rand.Rand) Resources {
	between := func(lo, hi float64) float64 { return (lo + rng.Float64()*(hi-lo)) * MB }
	switch rng.IntN(3) {
	case 0:
		return Resources{Model: ModelBasic, Switching: between(10, 100), Disk: between(20, 200)}
	case 1:
		r := patagonia
		r.CPU.Net = between(30, 90)
		r.Memory = between(100, 400)
		return r
	default:
		r := dollyRes
		r.Cores = float64(1 + rng.IntN(8))
		r.CPU.Copy = between(1000, 8000)
		r.CPU.Net = r.CPU.Copy
		r.Disk = between(100, 2000)
		r.ParallelDecompress = rng.IntN(2) == 0
		return r
	}
}

// randomSetup draws a network of one to four switches in a random tree and
// a random spanning tree over all its hosts.
func randomSetup(rng *rand.Rand) (Network, Plan) {
	var net Network
	switches := 1 + rng.IntN(4)
	for s := range switches {
		net.Switches = append(net.Switches, Switch{Name: fmt.Sprintf("sw%d", s), Backplane: float64(rng.IntN(2)) * 2000 * MB})
		if s > 0 {
			net.Links = append(net.Links, SwitchLink{A: fmt.Sprintf("sw%d", rng.IntN(s)), B: fmt.Sprintf("sw%d", s),
				Capacity: []float64{fe, gbe, 1250 * MB}[rng.IntN(3)]})
		}
	}
	n := 1 + rng.IntN(30)
	for i := range n + 1 {
		h := Host{Name: fmt.Sprintf("h%02d", i), Switch: fmt.Sprintf("sw%d", rng.IntN(switches)),
			Link: []float64{fe, gbe, 1250 * MB}[rng.IntN(3)], Resources: randomResources(rng)}
		if i == 0 {
			h.Role = RoleSource
		}
		net.Hosts = append(net.Hosts, h)
	}
	parent := []int{-1}
	for v := 1; v <= n; v++ {
		parent = append(parent, rng.IntN(v))
	}
	tree, err := Explicit(parent)
	if err != nil {
		panic(err)
	}
	plan := Plan{Tree: tree, Hosts: hostNames(net)}
	if rng.IntN(2) == 0 {
		plan.Compression = Compression{Codec: "gzip", Factor: 1 + 3*rng.Float64()}
		for i := range net.Hosts {
			r := &net.Hosts[i].Resources
			r.CPU.Decompress = map[string]float64{"gzip": 10 * MB * (1 + 10*rng.Float64())}
		}
	}
	return net, plan
}

// TestAddingALimitNeverRaisesRate tightens or adds one resource on a random
// host or link and checks that the predicted rate does not go up.
func TestAddingALimitNeverRaisesRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tighten := []func(*Network, *rand.Rand){
		func(n *Network, rng *rand.Rand) {
			n.Hosts[rng.IntN(len(n.Hosts))].Resources.IOBus = (10 + 500*rng.Float64()) * MB
		},
		func(n *Network, rng *rand.Rand) {
			n.Hosts[rng.IntN(len(n.Hosts))].Resources.Disk = (5 + 100*rng.Float64()) * MB
		},
		func(n *Network, rng *rand.Rand) { n.Hosts[rng.IntN(len(n.Hosts))].Link /= 1 + 9*rng.Float64() },
		func(n *Network, rng *rand.Rand) {
			n.Switches[rng.IntN(len(n.Switches))].Backplane = (50 + 500*rng.Float64()) * MB
		},
		func(n *Network, rng *rand.Rand) {
			if len(n.Links) > 0 {
				n.Links[rng.IntN(len(n.Links))].Capacity /= 1 + 9*rng.Float64()
			}
		},
		func(n *Network, rng *rand.Rand) {
			r := &n.Hosts[rng.IntN(len(n.Hosts))].Resources
			r.Memory = (50 + 500*rng.Float64()) * MB
		},
	}
	for trial := range 500 {
		net, plan := randomSetup(rng)
		before, err := Evaluate(net, plan, Options{})
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		// Copy what the change may touch so that before stays valid.
		tight := net
		tight.Hosts = append([]Host(nil), net.Hosts...)
		tight.Switches = append([]Switch(nil), net.Switches...)
		tight.Links = append([]SwitchLink(nil), net.Links...)
		tighten[rng.IntN(len(tighten))](&tight, rng)
		after, err := Evaluate(tight, plan, Options{})
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if after.Rate > before.Rate*(1+1e-12) {
			t.Fatalf("trial %d: a tighter limit raised b from %v to %v", trial, before.Rate, after.Rate)
		}
		if len(after.Binding) == 0 || !near(after.Binding[0].Bound(), after.Rate) {
			t.Fatalf("trial %d: binding %v does not set the rate %v", trial, after.Binding, after.Rate)
		}
	}
}

// TestChainRateIndependentOfLength: on one switch every middle node of a
// chain does the same work and every link carries one channel per
// direction, so adding nodes does not change b.
func TestChainRateIndependentOfLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		res := randomResources(rng)
		link := []float64{fe, gbe, 1250 * MB}[rng.IntN(3)]
		comp := Compression{}
		if rng.IntN(2) == 0 {
			comp = Compression{Codec: "zstd", Factor: 1.5 + 2*rng.Float64()}
			res.CPU.Decompress = map[string]float64{"zstd": 200 * MB}
		}
		want := mustEvaluate(t, oneSwitch(2, link, res), Chain(2), comp).Rate
		for _, n := range []int{3, 5, 17, 64, 200} {
			got := mustEvaluate(t, oneSwitch(n, link, res), Chain(n), comp).Rate
			if !near(got, want) {
				t.Fatalf("trial %d (%s model): chain of %d runs at %v, chain of 2 at %v", trial, res.Model, n, got, want)
			}
		}
	}
}
