package server

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"dolly/capacity"
	"dolly/dolly/relay"
	"dolly/internal/natural"
)

// A node far slower than the rest (a bad cable that came up at 10 Mbit/s,
// an old disk) would hold the whole plan to its rate. It is served apart
// instead: the plan runs over the others at the rate they sustain, and the
// slow node gets the stream at its own pace from a node of the plan whose
// upload the plan leaves idle (a chain's tail, a tree's leaf), which keeps
// what the slow node has not taken yet in a spool (relay.AttachPaced).

// Apart is a node the plan serves apart. Nodes served apart that are
// alike (a switch behind a thin trunk) form a chain of their own: its head
// is served at its own pace (Paced) by a node of the plan, and each of
// the others by the node before it.
type Apart struct {
	Name  string  // the node
	From  string  // its upstream
	Paced bool    // From, a node of the plan, serves it at its own pace
	Rate  float64 // its predicted rate, raw image bytes per second
	// Own is the rate the model gives the node alone with the source: what
	// its link, disk and CPU allow, and the links on the way.
	Own float64
}

// apartGain is how much faster the plan must run without a node for that
// node to be served apart: a node that barely holds the plan back is
// better kept in it.
const apartGain = 1.5

// serveApart takes the slowest nodes out of ch's plan while the plan
// without them runs clearly faster (apartGain), and has each served by a
// leaf of the plan. choose plans a network as ch was planned, compressed
// or not as told. It returns ch unchanged when no node stands apart.
//
// The stream is one for the whole cast, so the plan without them sends it
// as ch does: a switch behind a thin trunk is what makes compression pay,
// and the plan of the source's side alone would often send it raw, which
// the nodes apart would then take at a fraction of the rate (a third in
// the lab of two switches).
func serveApart(net capacity.Network, opt capacity.Options, ch Choice, choose func(capacity.Network, Compress) (Choice, error)) Choice {
	if !ch.Modeled {
		return ch
	}
	comp := ch.Result.Plan.Compression
	keep := CompressNo
	if comp.Enabled() {
		keep = CompressYes
	}
	own := map[string]float64{}
	for _, h := range net.Hosts {
		if h.Role != capacity.RoleSource {
			own[h.Name] = aloneRate(net, h.Name, comp, opt)
		}
	}
	whole, with := ch, ch.Result.Rate
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
	main := net
	for k := 1; k <= len(cands) && k < nodes(net); k++ {
		rest := net
		for _, name := range cands[:k] {
			rest = without(rest, name)
		}
		next, err := choose(rest, keep)
		if err != nil || !next.Modeled || next.Result.Rate < apartGain*ch.Result.Rate {
			continue
		}
		ch, apart, main = next, cands[:k], rest
	}
	if len(apart) == 0 {
		return ch
	}
	ch.Apart = placeApart(net, ch.Result, apart, own, opt)
	if r, ok := beside(main, net, ch, opt); ok {
		// The nodes apart were left out for a plan judged without them;
		// beside them it must still gain as much.
		if r.Rate < apartGain*with {
			return whole
		}
		ch.Result = r
	}
	ch.Notes = append(ch.Notes, apartNote(ch, with))
	return ch
}

// beside is the plan's prediction with the nodes served apart running
// beside it: on a machine they share with the plan's hosts (emulated
// hosts on one box), the CPU their streams take is not the plan's.
func beside(main, net capacity.Network, ch Choice, opt capacity.Options) (capacity.Result, bool) {
	used := map[string]float64{} // cores, by machine
	var group []string
	rate := 0.0
	flush := func() {
		if len(group) == 0 {
			return
		}
		sub := net
		sub.Hosts = slices.DeleteFunc(slices.Clone(net.Hosts), func(h capacity.Host) bool {
			return h.Role != capacity.RoleSource && !slices.Contains(group, h.Name)
		})
		sub = alongside(sub, net)
		src := ch.Result.Plan.Hosts[0]
		plan := capacity.Plan{Tree: capacity.Chain(len(group)), Hosts: append([]string{src}, group...), Compression: ch.Result.Plan.Compression}
		r, err := capacity.Evaluate(sub, plan, opt)
		if err == nil {
			// Yielding, they take the stream in and pass it on all along,
			// and decode, check and write only for the share.
			share := yieldShare(rate, ch.Result, opt)
			passing := map[string]float64{}
			if share < 1 {
				p, err := capacity.Evaluate(passingOnly(sub, group), plan, opt)
				if err != nil {
					share = 1 // counted whole, as if they did not yield
				}
				for _, c := range p.Constraints {
					if c.Kind == capacity.MachineCPULimit {
						passing[c.Subject] += c.Coef
					}
				}
			}
			for _, c := range r.Constraints {
				if c.Kind == capacity.MachineCPULimit {
					pass := min(passing[c.Subject], c.Coef)
					used[c.Subject] += (pass + (c.Coef-pass)*share) * rate
				}
			}
		}
		group = nil
	}
	for _, a := range ch.Apart {
		if a.Paced {
			flush()
		}
		group, rate = append(group, a.Name), a.Rate
	}
	flush()
	if len(used) == 0 {
		return capacity.Result{}, false
	}
	main = alongside(main, net)
	main.Hosts = slices.Clone(main.Hosts)
	for i := range main.Hosts {
		h := &main.Hosts[i]
		if u := used[h.Machine]; u > 0 && h.Machine != "" {
			cores := h.Resources.Cores
			if cores <= 0 {
				cores = 1
			}
			h.Resources.Cores = max(cores-u, cores/10)
		}
	}
	r, err := capacity.Evaluate(main, ch.Result.Plan, opt)
	if err != nil || r.Rate <= 0 {
		return capacity.Result{}, false
	}
	return r, true
}

// yieldShare is the share of the plan's time in which nodes served apart,
// taking the stream at rate (raw image bytes per second), take the cores of
// a machine they share with the plan's hosts. They yield them (see
// control.Assign.Yield) until their relays' histories are full, which
// their stream fills at its pace; a plan done by then leaves their work to
// the cores it frees. 1 where the image's size is unknown.
func yieldShare(rate float64, plan capacity.Result, opt capacity.Options) float64 {
	if opt.ImageBytes <= 0 || !(rate > 0) || !(plan.Rate > 0) {
		return 1
	}
	wire := 1 - opt.ZeroFraction // a raw stream sends its zero runs as headers
	if c := plan.Plan.Compression; c.Enabled() {
		wire = 1 / c.Factor
	}
	fill := float64(relay.HistoryBytes-relay.YieldRoom) / (rate * wire)
	return max(0, 1-fill*plan.Rate/float64(opt.ImageBytes))
}

// passingOnly is net with the work of the hosts names of their own made
// free: decoding, the frames' check and the target's write. What is left is
// what a node that yields costs while it does: taking the stream in and
// passing it on. The relay's copy into its history stays where the relay
// was not measured whole (it is counted as a copy then).
func passingOnly(net capacity.Network, names []string) capacity.Network {
	const free = 1e30 // bytes per second: a cost of next to nothing
	net.Hosts = slices.Clone(net.Hosts)
	for i := range net.Hosts {
		h := &net.Hosts[i]
		if !slices.Contains(names, h.Name) {
			continue
		}
		cpu := h.Resources.CPU
		cpu.Disk, cpu.Digest = free, free
		if cpu.Relay > 0 {
			cpu.Copy = free
		}
		cpu.Decompress = maps.Clone(cpu.Decompress)
		for codec := range cpu.Decompress {
			cpu.Decompress[codec] = free
		}
		h.Resources.CPU = cpu
	}
	return net
}

// alongside is sub, a part of the cast's network all, with every machine
// told how many of the cast's hosts run on it beside sub's
// (Machine.Beside): what a machine's hosts cost each other grows with all
// of them, not with those of one plan.
func alongside(sub, all capacity.Network) capacity.Network {
	beside := map[string]int{}
	for _, h := range all.Hosts {
		if h.Machine != "" {
			beside[h.Machine]++
		}
	}
	for _, h := range sub.Hosts {
		if h.Machine != "" {
			beside[h.Machine]--
		}
	}
	machines := maps.Clone(sub.Machines)
	for m, n := range beside {
		if n > 0 {
			if machines == nil {
				machines = map[string]capacity.Machine{}
			}
			mc := machines[m]
			mc.Beside = n
			machines[m] = mc
		}
	}
	sub.Machines = machines
	return sub
}

// placeApart has the nodes of apart served by the leaves of the plan, the
// deepest first: nodes alike (within apartGain of one another) form a
// chain, placed as the planner places one (few trunk crossings), whose head
// a leaf serves at its own pace.
func placeApart(net capacity.Network, plan capacity.Result, apart []string, own map[string]float64, opt capacity.Options) []Apart {
	t := plan.Plan.Tree
	kids := t.ChildLists()
	var leaves []int
	for v := len(kids) - 1; v > 0; v-- {
		if len(kids[v]) == 0 {
			leaves = append(leaves, v)
		}
	}
	// Fastest first, cut where one is apartGain slower than its group's head.
	sorted := slices.Clone(apart)
	slices.SortStableFunc(sorted, func(a, b string) int { return cmp.Compare(own[b], own[a]) })
	var groups [][]string
	for _, name := range sorted {
		if g := len(groups) - 1; g >= 0 && own[groups[g][0]] <= apartGain*own[name] {
			groups[g] = append(groups[g], name)
			continue
		}
		groups = append(groups, []string{name})
	}
	link := map[string]float64{}
	for _, h := range net.Hosts {
		link[h.Name] = h.Link * linkShare(net)
	}
	served := map[int]int{} // groups each leaf serves
	leafOf := make([]int, len(groups))
	for i := range groups {
		leafOf[i] = leaves[i%len(leaves)]
		served[leafOf[i]]++
	}
	var out []Apart
	for i, g := range groups {
		g = chainOrder(net, g, plan.Plan.Compression)
		// A chain served apart runs at its slowest node's rate, never
		// ahead of the node that serves it, and shares that node's link.
		rate := plan.Rate
		for _, name := range g {
			rate = min(rate, own[name])
		}
		if spare := link[plan.Plan.Hosts[leafOf[i]]] / float64(served[leafOf[i]]); spare > 0 {
			rate = min(rate, spare)
		}
		from := plan.Plan.Hosts[leafOf[i]]
		for j, name := range g {
			out = append(out, Apart{Name: name, From: from, Paced: j == 0, Own: own[name], Rate: rate})
			from = name
		}
	}
	return out
}

// chainOrder orders nodes along a chain as the planner would place them
// on their own with the source: by switch, crossing trunks as few times as
// it can.
func chainOrder(net capacity.Network, nodes []string, comp capacity.Compression) []string {
	if len(nodes) < 2 {
		return nodes
	}
	sub := net
	sub.Hosts = slices.DeleteFunc(slices.Clone(net.Hosts), func(h capacity.Host) bool {
		return h.Role != capacity.RoleSource && !slices.Contains(nodes, h.Name)
	})
	p, err := capacity.Arrange(sub, capacity.Chain(len(nodes)), comp)
	if err != nil {
		return nodes
	}
	return p.Hosts[1:]
}

func apartNote(ch Choice, with float64) string {
	var parts []string
	for _, a := range ch.Apart {
		parts = append(parts, fmt.Sprintf("%s (alone %s MB/s) from %s at %s MB/s", a.Name, mbps(a.Own), a.From, mbps(a.Rate)))
	}
	if len(parts) > 8 {
		parts = append(parts[:8], fmt.Sprintf("and %d more", len(parts)-8))
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
