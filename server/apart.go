package server

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"dolly/capacity"
	"dolly/internal/natural"
)

// A node far slower than the rest (a bad cable that came up at 10 Mbit/s,
// an old disk) would hold the whole plan to its rate. It is served apart
// instead: the plan runs over the others at the rate they sustain, and the
// slow node gets the stream at its own pace from a node of the plan whose
// upload the plan leaves idle (a chain's tail, a tree's leaf), which keeps
// what the slow node has not taken yet in a spool (relay.AttachPaced).

// Apart is a node the plan serves apart.
type Apart struct {
	Name string  // the node
	From string  // the node of the plan that serves it
	Rate float64 // its predicted rate, raw image bytes per second
	// Own is the rate the model gives the node alone with the source: what
	// its link, disk and CPU allow.
	Own float64
}

// apartGain is how much faster the plan must run without a node for that
// node to be served apart: a node that barely holds the plan back is
// better kept in it.
const apartGain = 1.5

// serveApart takes the slowest nodes out of ch's plan while the plan
// without them runs clearly faster (apartGain), and has each served by a
// leaf of the plan. choose plans a network as ch was planned. It returns
// ch unchanged when no node stands apart.
func serveApart(net capacity.Network, opt capacity.Options, ch Choice, choose func(capacity.Network) (Choice, error)) Choice {
	if !ch.Modeled {
		return ch
	}
	comp := ch.Result.Plan.Compression
	own := map[string]float64{}
	for _, h := range net.Hosts {
		if h.Role != capacity.RoleSource {
			own[h.Name] = aloneRate(net, h.Name, comp, opt)
		}
	}
	with := ch.Result.Rate
	// Candidates stand well below the median node; of them, the k slowest
	// go apart for the least k that makes the plan clearly faster (several
	// alike must go together), and more only if that gains clearly again.
	var rates []float64
	for _, r := range own {
		rates = append(rates, r)
	}
	if len(rates) < 2 {
		return ch
	}
	slices.Sort(rates)
	median := rates[len(rates)/2]
	var cands []string
	for name, r := range own {
		if r > 0 && r < median/apartGain {
			cands = append(cands, name)
		}
	}
	slices.SortFunc(cands, func(a, b string) int { return cmp.Or(cmp.Compare(own[a], own[b]), natural.Compare(a, b)) })
	var apart []string
	for k := 1; k <= len(cands) && k <= nodes(net)/2 && k < nodes(net); k++ {
		rest := net
		for _, name := range cands[:k] {
			rest = without(rest, name)
		}
		next, err := choose(rest)
		if err != nil || !next.Modeled || next.Result.Rate < apartGain*ch.Result.Rate {
			continue
		}
		ch, apart = next, cands[:k]
	}
	if len(apart) == 0 {
		return ch
	}
	ch.Apart = placeApart(net, ch.Result, apart, own)
	ch.Notes = append(ch.Notes, apartNote(ch, with))
	return ch
}

// placeApart has each node of apart served by a leaf of the plan,
// spreading them over the leaves, the deepest first.
func placeApart(net capacity.Network, plan capacity.Result, apart []string, own map[string]float64) []Apart {
	t := plan.Plan.Tree
	kids := t.ChildLists()
	var leaves []int
	for v := len(kids) - 1; v > 0; v-- {
		if len(kids[v]) == 0 {
			leaves = append(leaves, v)
		}
	}
	link := map[string]float64{}
	for _, h := range net.Hosts {
		link[h.Name] = h.Link * linkShare(net)
	}
	served := map[int][]int{} // leaf vertex → indices into out
	out := make([]Apart, len(apart))
	for i, name := range apart {
		leaf := leaves[i%len(leaves)]
		out[i] = Apart{Name: name, From: plan.Plan.Hosts[leaf], Own: own[name]}
		served[leaf] = append(served[leaf], i)
	}
	for leaf, idx := range served {
		spare := link[plan.Plan.Hosts[leaf]] / float64(len(idx))
		for _, i := range idx {
			// A paced node never gets ahead of the node that serves it.
			r := min(out[i].Own, plan.Rate)
			if spare > 0 {
				r = min(r, spare)
			}
			out[i].Rate = r
		}
	}
	return out
}

func apartNote(ch Choice, with float64) string {
	var parts []string
	for _, a := range ch.Apart {
		parts = append(parts, fmt.Sprintf("%s (alone %s MB/s) from %s at %s MB/s", a.Name, mbps(a.Own), a.From, mbps(a.Rate)))
	}
	return fmt.Sprintf("served apart, at their own pace, so that the others run at %s MB/s, not %s: %s",
		mbps(ch.Result.Rate), mbps(with), strings.Join(parts, "; "))
}

// aloneRate is the model's rate for node name alone with the source.
func aloneRate(net capacity.Network, name string, comp capacity.Compression, opt capacity.Options) float64 {
	sub := net
	sub.Hosts = slices.DeleteFunc(slices.Clone(net.Hosts), func(h capacity.Host) bool {
		return h.Role != capacity.RoleSource && h.Name != name
	})
	src := ""
	for _, h := range sub.Hosts {
		if h.Role == capacity.RoleSource {
			src = h.Name
		}
	}
	r, err := capacity.Evaluate(sub, capacity.Plan{Tree: capacity.Chain(1), Hosts: []string{src, name}, Compression: comp}, opt)
	if err != nil || r.Rate >= 1e15 {
		return 0
	}
	return r.Rate
}

// without is net less the host name.
func without(net capacity.Network, name string) capacity.Network {
	net.Hosts = slices.DeleteFunc(slices.Clone(net.Hosts), func(h capacity.Host) bool { return h.Name == name })
	return net
}

// nodes counts net's receiving hosts.
func nodes(net capacity.Network) int {
	n := 0
	for _, h := range net.Hosts {
		if h.Role != capacity.RoleSource {
			n++
		}
	}
	return n
}

func linkShare(net capacity.Network) float64 {
	if e := net.LinkEfficiency; e > 0 && e <= 1 {
		return e
	}
	return 1
}
