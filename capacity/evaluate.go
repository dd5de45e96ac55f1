package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Compression describes a compressed image. Factor is c, raw bytes per
// compressed byte; a factor of 1 or less means the image is sent raw.
type Compression struct {
	Codec  string  `json:"codec"`  // "zstd" or "gzip"
	Factor float64 `json:"factor"` // c
}

// Enabled reports whether the stream is compressed.
func (c Compression) Enabled() bool { return c.Factor > 1 }

// Name returns the codec, "none" for a raw stream.
func (c Compression) Name() string {
	switch {
	case !c.Enabled():
		return "none"
	case c.Codec == "":
		return "compressed"
	default:
		return c.Codec
	}
}

// Plan is one way to run a cast: a logical tree, the host each vertex runs
// on and the compression of the stream.
type Plan struct {
	Tree        Tree
	Hosts       []string // Hosts[v] names the host of vertex v; Hosts[0] is the source
	Compression Compression
}

// Name describes the plan briefly: "chain", "2-tree", "star", "tree".
func (p Plan) Name() string { return p.Tree.Name() }

// Result is the model's prediction for one plan.
type Result struct {
	Plan        Plan
	Rate        float64       // predicted rate in raw image bytes per second
	Depth       int           // hops from the source to the deepest node
	ETA         time.Duration // predicted time of the whole cast, see ETA
	Bottleneck  string        // the binding constraints in words
	Binding     []Constraint  // the constraints that set Rate
	Constraints []Constraint  // every constraint of the plan
	// Stretches are the rates of the image's pieces, in order, when the
	// image was profiled piece by piece; see RateOver.
	Stretches []Stretch
}

// Evaluate predicts the rate of one plan on a network.
func Evaluate(net Network, plan Plan, opt Options) (Result, error) {
	f, err := compile(net)
	if err != nil {
		return Result{}, err
	}
	return f.evaluate(plan, opt.withDefaults())
}

// evaluate maps the plan's logical channels onto the physical network,
// counts the channels sharing each link direction and switch, adds every
// host's own limits and solves for the rate.
func (f *fabric) evaluate(plan Plan, opt Options) (Result, error) {
	t := plan.Tree
	if err := t.Validate(); err != nil {
		return Result{}, err
	}
	if len(plan.Hosts) != len(t.Parent) {
		return Result{}, fmt.Errorf("plan has %d hosts for %d tree vertices", len(plan.Hosts), len(t.Parent))
	}
	comp := plan.Compression
	if comp.Factor < 0 || math.IsNaN(comp.Factor) || math.IsInf(comp.Factor, 0) {
		return Result{}, fmt.Errorf("compression factor %v: want a finite factor ≥ 1", comp.Factor)
	}
	if opt.ZeroFraction < 0 || opt.ZeroFraction >= 1 || math.IsNaN(opt.ZeroFraction) {
		return Result{}, fmt.Errorf("zero fraction %v: want a share from 0 up to (not including) 1", opt.ZeroFraction)
	}
	if !(opt.HoleFraction >= 0 && opt.HoleFraction <= opt.ZeroFraction) {
		return Result{}, fmt.Errorf("hole fraction %v: want a share from 0 up to the zero fraction %v", opt.HoleFraction, opt.ZeroFraction)
	}
	if !(opt.ZeroedFraction >= 0 && opt.ZeroedFraction <= opt.ZeroFraction) {
		return Result{}, fmt.Errorf("zeroed fraction %v: want a share from 0 up to the zero fraction %v", opt.ZeroedFraction, opt.ZeroFraction)
	}
	if !(opt.UndecodedFraction >= 0 && opt.UndecodedFraction <= opt.ZeroFraction) {
		return Result{}, fmt.Errorf("undecoded fraction %v: want a share from 0 up to the zero fraction %v", opt.UndecodedFraction, opt.ZeroFraction)
	}
	if !(opt.WholeFraction >= 0 && opt.WholeFraction <= 1) {
		return Result{}, fmt.Errorf("whole fraction %v: want a share from 0 to 1", opt.WholeFraction)
	}
	st := stream{Compression: comp, zero: opt.ZeroFraction, zeroed: opt.ZeroedFraction, holes: opt.HoleFraction, undecoded: opt.UndecodedFraction, whole: opt.WholeFraction, stored: opt.Stored}

	host := make([]int, len(t.Parent)) // host index of each vertex
	used := make([]bool, len(f.net.Hosts))
	for v, name := range plan.Hosts {
		i, ok := f.hostIndex[name]
		if !ok {
			return Result{}, fmt.Errorf("plan names unknown host %q", name)
		}
		if used[i] {
			return Result{}, fmt.Errorf("host %q appears twice in the plan", name)
		}
		used[i] = true
		host[v] = i
	}

	// Count logical channels per link direction and per switch.
	up := make([]int, len(f.net.Hosts))
	down := make([]int, len(f.net.Hosts))
	trunkUse := make([][2]int, len(f.trunks))
	switchUse := make([]int, f.switches)
	out := make([]int, len(t.Parent))
	for v := 1; v < len(t.Parent); v++ {
		p := t.Parent[v]
		out[p]++
		from, to := host[p], host[v]
		up[from]++
		down[to]++
		a, b := f.hostSw[from], f.hostSw[to]
		switchUse[a]++
		err := f.route(a, b, func(trunk int, forward bool, sw int) {
			if forward {
				trunkUse[trunk][0]++
			} else {
				trunkUse[trunk][1]++
			}
			switchUse[sw]++
		})
		if err != nil {
			return Result{}, fmt.Errorf("channel %s→%s: %w", plan.Hosts[p], plan.Hosts[v], err)
		}
	}

	limits := func(st stream) ([]Constraint, error) {
		cs, err := f.limits(plan, st, host, out, channels{up: up, down: down, trunks: trunkUse, switches: switchUse})
		if err == nil && opt.MaxStreamRate > 0 {
			cs = append(cs, Constraint{Kind: SourceRateLimit, Subject: plan.Hosts[0], Streams: 1, Coef: st.wire(), Cap: opt.MaxStreamRate})
		}
		return cs, err
	}
	constraints, err := limits(st)
	if err != nil {
		return Result{}, err
	}
	rate, binding := Solve(constraints)
	bottleneck := describeBinding(binding)
	var stretches []Stretch
	if len(opt.Pieces) > 0 {
		rate, binding, bottleneck, stretches, err = pieceRate(opt.Pieces, st, limits, float64(opt.ImageBytes), float64(opt.AheadBytes))
		if err != nil {
			return Result{}, err
		}
	}
	wire := st.wire()
	depth := t.Depth()
	return Result{
		Plan:        plan,
		Rate:        rate,
		Depth:       depth,
		ETA:         ETA(rate, depth, f.hopLag(host[1:], binding, nearlyBound(constraints, rate), rate*wire, opt), opt),
		Bottleneck:  bottleneck,
		Binding:     binding,
		Constraints: constraints,
		Stretches:   stretches,
	}, nil
}

// channels counts the logical channels a plan puts on each link direction,
// trunk direction and switch.
type channels struct {
	up, down []int
	trunks   [][2]int
	switches []int
}

// limits is every constraint of the plan for one stream: the links', the
// switches', the hosts' and the shared machines'.
func (f *fabric) limits(plan Plan, st stream, host, out []int, use channels) ([]Constraint, error) {
	wire := st.wire()
	t := plan.Tree
	up, down, trunkUse, switchUse := use.up, use.down, use.trunks, use.switches
	eff := f.net.linkEfficiency()
	constraints := make([]Constraint, 0, 6*len(t.Parent))
	link := func(name string, streams int, capacity float64) {
		if streams > 0 && capacity > 0 {
			constraints = append(constraints, Constraint{Kind: LinkLimit, Subject: name,
				Streams: streams, Coef: float64(streams) * wire, Cap: capacity * eff})
		}
	}
	for _, i := range host {
		link(f.upName[i], up[i], f.net.Hosts[i].Link)
		link(f.downName[i], down[i], f.net.Hosts[i].Link)
	}
	for i, tr := range f.trunks {
		link(tr.name[0], trunkUse[i][0], tr.capacity)
		link(tr.name[1], trunkUse[i][1], tr.capacity)
	}
	for s, n := range switchUse {
		sw := f.net.Switches[s]
		if n > 0 && sw.Backplane > 0 {
			constraints = append(constraints, Constraint{Kind: BackplaneLimit, Subject: sw.Name,
				Streams: n, Coef: float64(n) * wire, Cap: sw.Backplane})
		}
	}
	machines := map[string]*sharedMachine{}
	var machineOrder []string
	for v, i := range host {
		h := f.net.Hosts[i]
		first := len(constraints)
		var err error
		constraints, err = appendHostLimits(constraints, h.Name, h.Resources, v == 0, out[v], st)
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		if h.Machine == "" {
			continue
		}
		m := machines[h.Machine]
		if m == nil {
			mc := f.net.Machines[h.Machine]
			m = &sharedMachine{contention: mc.Contention, beside: mc.Beside, cast: mc.CastCost * st.wire(), busyShare: mc.BusyShare, sharedDisk: mc.SharedDisk, crowdDisk: mc.DiskBytesPerSec}
			machines[h.Machine] = m
			machineOrder = append(machineOrder, h.Machine)
		}
		m.add(constraints[first:])
	}
	for _, name := range machineOrder {
		constraints = machines[name].appendLimits(constraints, name)
	}

	return constraints, nil
}

// hopLag is how long a hop delays the end of the stream for every node
// below it: the pipeline fill of paper 002. A store-and-forward node (the
// basic and paper models) sends a frame on only once it has it whole: a
// frame's time on the wire (at wireRate, stream bytes a second) per hop.
// dolly's relays forward bytes as they arrive, a batch at a time: what
// their upstream delivers while they wait to wake (RelayWake, or
// CrowdedRelayWake on a machine whose cores nearly bind, see
// Result.CrowdedWake; RelayMinBatch at least). While something the relays
// do not share sets the rate (the source's disk or its compressing
// thread), they have time to spare and the stream's end passes each hop
// at once. While a link sets it, or a CPU they run on (each relay then
// forwards in its turn, behind the others'), the end waits at each hop
// for the batch its relay wakes for, and then some: the last batch is
// short of a wake-up's, and waits for its upstream to close, which that
// node does once its own reader has the end, its last batch being at most
// a wake-up's work; a default wake-up stands for that. In the emulated lab
// the last node of a chain finished 5-16 ms a hop (median 10) after the
// first on 4 ms wake-ups (raw and zstd chains of 4 to 24 nodes at
// 100 Mbit/s and 1 Gbit/s), and 1-40 ms (median 15) on 12 ms ones (the
// machine's cores binding: zstd chains of 24 at 100 Mbit/s, chains of 4
// and 8 at 1 Gbit/s and unshaped). The largest over the receiving hosts
// counts.
func (f *fabric) hopLag(receivers []int, binding []Constraint, nearly map[string]bool, wireRate float64, opt Options) time.Duration {
	relaysBound := false
	for _, c := range binding {
		switch c.Kind {
		case LinkLimit, BackplaneLimit:
			relaysBound = true
		case CPULimit:
			relaysBound = relaysBound || !c.Flow.Source
		case MachineCPULimit:
			for _, i := range receivers {
				relaysBound = relaysBound || f.net.Hosts[i].Machine == c.Subject
			}
		}
	}
	onWire := func(bytes float64) time.Duration {
		if !(wireRate > 0) {
			return 0
		}
		return time.Duration(bytes / wireRate * float64(time.Second))
	}
	var most time.Duration
	for _, i := range receivers {
		h := f.net.Hosts[i]
		hop := onWire(float64(opt.FrameBytes))
		if h.Resources.Model == ModelDolly {
			hop = 0
			if relaysBound {
				wake := RelayWake
				if h.Machine != "" && nearly[h.Machine] {
					wake = CrowdedRelayWake
				}
				hop = max(wake, onWire(RelayMinBatch)) + RelayWake
			}
		}
		most = max(most, hop)
	}
	return most
}

// cpuNearlyBinds is how close to the plan's rate the CPU of a machine its
// hosts share may hold it for the machine's relays to wake less often
// (CrowdedRelayWake): within half again, as the model counts a crowded
// machine's CPU short of what the cast takes (casts bound by it ran 0-35%
// below their previews).
const cpuNearlyBinds = 1.5

// nearlyBound is the crowded machines (more of the cast's hosts than
// cores, those whose nodes dolly-server has share them) whose CPU holds a
// plan of the given rate and constraints back, or nearly (cpuNearlyBinds).
func nearlyBound(constraints []Constraint, rate float64) map[string]bool {
	nearly := map[string]bool{}
	if !(rate > 0) {
		return nearly
	}
	for _, c := range constraints {
		if c.Kind == MachineCPULimit && float64(c.Streams) > c.Cap && c.Coef > 0 && c.Bound() <= cpuNearlyBinds*rate {
			nearly[c.Subject] = true
		}
	}
	return nearly
}

// CrowdedWake says whether the cores of a machine that more hosts of the
// plan share than it has hold it back, or nearly: the relays there then gather
// CrowdedRelayWake of the stream before they wake, for fewer wake-ups
// leave more of the machine to the cast.
func (r Result) CrowdedWake() bool {
	return len(nearlyBound(r.Constraints, r.Rate)) > 0
}

// sharedMachine sums the CPU and memory demands of hosts that run on one
// machine: several emulated hosts on a test box, or several nodes on one PC.
type sharedMachine struct {
	hosts             int
	beside            int // hosts of the cast beside the plan (Machine.Beside)
	contention        float64
	cast              float64 // CPU per raw byte, once for the cast
	busyShare         float64 // Machine.BusyShare: 0, all the cores
	cpu, cpuCap       float64
	cpuDown           float64 // of cpu, the nodes' work behind their buffers
	memory, memoryCap float64
	sharedDisk        bool
	crowdDisk         float64 // the shared disk's rate with all its writers at once; 0: unknown
	writers           int     // hosts that write a target to the shared disk
	disk, diskCap     float64
}

func (m *sharedMachine) add(cs []Constraint) {
	m.hosts++
	for _, c := range cs {
		switch c.Kind {
		case CPULimit:
			m.cpu += c.Coef
			m.cpuDown += c.Down
			m.cpuCap = max(m.cpuCap, c.Cap)
		case MemoryLimit:
			m.memory += c.Coef
			m.memoryCap = max(m.memoryCap, c.Cap)
		case DiskLimit:
			if !c.Flow.Source { // the source reads its image store, not the targets' disk
				m.writers++
				m.disk += c.Coef
				m.diskCap = max(m.diskCap, c.Cap)
			}
		}
	}
}

// appendLimits adds the machine's own inequalities once two or more hosts
// of the cast share it, the plan's or beside it.
func (m *sharedMachine) appendLimits(dst []Constraint, name string) []Constraint {
	if m.hosts+m.beside < 2 {
		return dst
	}
	if m.cpu > 0 && m.cpuCap > 0 {
		work, down := m.cpu, m.cpuDown
		if m.busyShare > 0 {
			// Idle cores take their part of every thread's time, a
			// decoder's too.
			work, down = m.cpu/m.busyShare, m.cpuDown/m.busyShare
		}
		crowd := 1 + m.contention*float64(m.hosts-1+m.beside)
		coef := work*crowd + m.cast
		dst = append(dst, Constraint{Kind: MachineCPULimit, Subject: name, Streams: m.hosts + m.beside, Coef: coef, Cap: m.cpuCap, Down: down * crowd})
	}
	if m.hosts < 2 { // the rest is the plan's hosts' alone
		return dst
	}
	if m.memory > 0 && m.memoryCap > 0 {
		dst = append(dst, Constraint{Kind: MachineMemoryLimit, Subject: name, Streams: m.hosts, Coef: m.memory, Cap: m.memoryCap})
	}
	if m.sharedDisk && m.writers > 1 && m.disk > 0 && m.diskCap > 0 {
		capacity := m.diskCap
		if m.crowdDisk > 0 {
			capacity = m.crowdDisk
		}
		dst = append(dst, Constraint{Kind: MachineDiskLimit, Subject: name, Streams: m.writers, Coef: m.disk, Cap: capacity})
	}
	return dst
}

// minReasonShare is the least share of a cast's time for which a reason is
// named in its bottleneck.
const minReasonShare = 0.05

// pieceRate is the rate over the image's pieces: each piece takes its share
// of the raw bytes at the rate its own stream allows, so the image's rate
// is the share-weighted harmonic mean of theirs; or, when the nodes'
// buffer (ahead stream bytes) lets the pieces overlap, the faster rate of
// aheadRate, for an image of imageBytes. The binding constraints are those
// of the reason that takes the most time piece by piece; the bottleneck
// names each reason with its share of that time when there are several.
func pieceRate(pieces []Piece, st stream, limits func(stream) ([]Constraint, error), imageBytes, ahead float64) (float64, []Constraint, string, []Stretch, error) {
	var total float64
	for i, p := range pieces {
		if err := p.check(); err != nil {
			return 0, nil, "", nil, fmt.Errorf("image piece %d: %w", i+1, err)
		}
		total += p.Share
	}
	type reason struct {
		text    string
		binding []Constraint
		time    float64
	}
	var reasons []*reason
	byText := map[string]*reason{}
	var spent float64
	stretches := make([]Stretch, 0, len(pieces))
	costs := make([]pieceCost, 0, len(pieces))
	for _, p := range pieces {
		p.Share /= total
		st.piece = &p
		cs, err := limits(st)
		if err != nil {
			return 0, nil, "", nil, err
		}
		rate, binding := Solve(cs)
		stretches = append(stretches, Stretch{Share: p.Share, Rate: rate})
		costs = append(costs, costOf(p.Share, st.wire(), cs))
		if math.IsInf(rate, 1) {
			continue // nothing to send, write or decode: no time
		}
		if !(rate > 0) {
			return 0, nil, "", nil, fmt.Errorf("image piece at %.0f%%: the plan moves nothing", 100*p.Share)
		}
		t := p.Share / rate
		spent += t
		text := describeBinding(binding)
		r := byText[text]
		if r == nil {
			r = &reason{text: text, binding: binding}
			byText[text] = r
			reasons = append(reasons, r)
		}
		r.time += t
	}
	if len(reasons) == 0 {
		return math.Inf(1), nil, "", stretches, nil
	}
	rate := 1 / spent
	if imageBytes > 0 && ahead > 0 {
		// Never below the pieces in turn, which the slices' coarser
		// steps can fall short of by a slice.
		if r, s, ok := aheadRate(costs, imageBytes, ahead); ok && r > rate {
			rate, stretches = r, s
		}
	}
	slices.SortStableFunc(reasons, func(a, b *reason) int { return cmp.Compare(b.time, a.time) })
	// Reasons that hold the cast up only briefly would crowd the line.
	shown := 1
	for shown < min(len(reasons), maxBottleneckGroups) && reasons[shown].time >= minReasonShare*spent {
		shown++
	}
	if shown == 1 {
		return rate, reasons[0].binding, reasons[0].text, stretches, nil
	}
	parts := []string{fmt.Sprintf("%.0f%% of the time: %s", 100*reasons[0].time/spent, reasons[0].text)}
	for _, r := range reasons[1:shown] {
		parts = append(parts, fmt.Sprintf("%.0f%%: %s", 100*r.time/spent, r.text))
	}
	return rate, reasons[0].binding, strings.Join(parts, "; "), stretches, nil
}
