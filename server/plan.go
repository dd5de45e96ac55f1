package server

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"dolly/capacity"
	"dolly/dolly/probe"
	"dolly/dolly/relay"
	"dolly/imaging"
	"dolly/internal/natural"
)

// SourceName is the source's name in plans and the capacity model.
const SourceName = "dolly-server"

// Compress says whether a cast may compress the stream.
type Compress string

const (
	CompressAuto Compress = "auto" // the capacity model decides
	CompressYes  Compress = "yes"  // compressed: as stored, or zstd on the fly
	CompressNo   Compress = "no"   // raw: decoded at the source if stored compressed
)

// ParseCompress reads the -compress flag.
func ParseCompress(s string) (Compress, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return CompressAuto, nil
	case "yes", "on", "true", "zstd":
		return CompressYes, nil
	case "no", "off", "false", "none", "raw":
		return CompressNo, nil
	}
	return "", fmt.Errorf("-compress %q: want auto, yes or no", s)
}

// Options turns an image profile into the capacity model's options.
func Options(p probe.Profile, frameSize int) capacity.Options {
	opt := capacity.Options{
		ImageBytes:   p.Size,
		FrameBytes:   int64(frameSize),
		ZeroFraction: min(p.ZeroFraction, 0.999),
		HoleFraction: min(p.HoleFraction, p.ZeroFraction, 0.999),
		// Only a stored image's: sent as stored, a node skips these.
		UndecodedFraction: min(max(p.RLESkipped, 0), p.ZeroFraction, 0.999),
		WholeFraction:     min(max(p.WholeFraction, 0), 1),
		Compression:       capacity.Compression{Codec: p.Codec.String(), Factor: p.Factor},
		Stored:            &capacity.Compression{Factor: 1},
		Pieces:            pieces(p),
		AheadBytes:        relay.HistoryBytes,
	}
	if p.Encoding.Compressed() {
		opt.Stored = &capacity.Compression{Codec: p.Encoding.String(), Factor: p.Factor}
	}
	return opt
}

// pieces are the profile's stretches as the model takes them: shares of
// the image, and decoding costs against the image's average (all alike
// when a stretch went untimed).
func pieces(p probe.Profile) []capacity.Piece {
	if len(p.Pieces) < 2 {
		return nil
	}
	var total int64
	timed := true
	for _, pc := range p.Pieces {
		total += pc.Size
		timed = timed && pc.DecodeRate > 0
	}
	out := make([]capacity.Piece, len(p.Pieces))
	var average float64 // decoding seconds per raw byte over the image
	for i, pc := range p.Pieces {
		out[i] = capacity.Piece{Share: float64(pc.Size) / float64(total), ZeroFraction: pc.ZeroFraction, Factor: pc.Factor, Decode: 1}
		if timed {
			out[i].Decode = 1 / pc.DecodeRate
			average += out[i].Share / pc.DecodeRate
		}
	}
	if timed {
		for i := range out {
			out[i].Decode /= average
		}
	}
	return out
}

// wireEncoding is how a plan sends an image stored as stored.
func wireEncoding(c capacity.Compression, stored imaging.Encoding) imaging.Encoding {
	switch {
	case !c.Enabled():
		return imaging.Raw
	case stored.Compressed():
		return stored
	}
	enc, err := imaging.ParseEncoding(c.Codec)
	if err != nil {
		return imaging.Zstd
	}
	return enc
}

// Choice is the plan a cast runs and the model's view of it.
type Choice struct {
	Result  capacity.Result   // the chosen plan and its prediction
	Ranked  []capacity.Result // every plan considered, best first
	Send    imaging.Encoding  // how the stream travels
	Modeled bool              // false when the model could not judge the plans
	Notes   []string
	// Apart are the nodes left out of the plan as too slow for it, each
	// served at its own pace by a node of the plan (see serveApart).
	Apart []Apart
}

// Choose ranks the plans for a network and picks the one to run: the
// operator's shape if given (placed as the planner would place it), else the
// best; compressed or not as the operator allows.
func Choose(net capacity.Network, opt capacity.Options, shape capacity.Kind, fanout int, compress Compress, stored imaging.Encoding) (Choice, error) {
	allowed := func(c capacity.Compression) bool {
		switch compress {
		case CompressYes:
			return c.Enabled()
		case CompressNo:
			return !c.Enabled()
		}
		return true
	}
	if compress == CompressYes && !opt.Compression.Enabled() {
		return Choice{}, fmt.Errorf("-compress yes: the image does not compress (factor %.2f)", opt.Compression.Factor)
	}
	var ch Choice
	ranked, err := capacity.Rank(net, opt)
	if err != nil {
		return ch, err
	}
	ch.Ranked = ranked
	var pool []capacity.Result
	if shape == "" {
		pool = ranked
	} else {
		tree := shapeTree(shape, len(net.Hosts)-1, fanout)
		comps := []capacity.Compression{{}}
		if opt.Compression.Enabled() {
			comps = append(comps, opt.Compression)
		}
		for _, c := range comps {
			plan, err := capacity.Arrange(net, tree, c)
			if err != nil {
				return ch, err
			}
			r, err := capacity.Evaluate(net, plan, opt)
			if err != nil {
				return ch, err
			}
			pool = append(pool, r)
		}
		slices.SortStableFunc(pool, func(a, b capacity.Result) int { return cmp.Compare(a.ETA, b.ETA) })
	}
	for _, r := range pool {
		if allowed(r.Plan.Compression) {
			ch.Result = r
			break
		}
	}
	if ch.Result.Plan.Hosts == nil {
		return ch, fmt.Errorf("no plan fits -compress %s", compress)
	}
	// Among the plans allowed, the one that stays fastest should the CPUs
	// cost what they may: the model's best, unless it leans on them.
	best := ch.Result
	doubt := newDoubter(net, opt)
	for _, r := range pool {
		if allowed(r.Plan.Compression) && doubt.rate(r) > doubt.rate(ch.Result) {
			ch.Result = r
		}
	}
	doubted := ch.Result
	var chainNote string
	if shape == "" {
		if chain, ok := preferChain(pool, allowed, doubted, doubt.rate); ok {
			chainNote = fmt.Sprintf("%s runs, not %s: a tree or star must beat the best chain by more than %.0f%%, the model's margin of error on the CPU's figures, as it loads its parents' links with several streams where a chain loads each with one (the chain %s MB/s, the other %s, with the codecs' figures in doubt)",
				planName(chain), planName(doubted), 100*(chainMargin-1), mbps(doubt.rate(chain)), mbps(doubt.rate(doubted)))
			ch.Result = chain
		}
	}
	if !sameShape(doubted.Plan, best.Plan) && !sameShape(ch.Result.Plan, best.Plan) {
		ch.Notes = append(ch.Notes, doubt.whyNot(best, ch.Result))
	}
	if chainNote != "" {
		ch.Notes = append(ch.Notes, chainNote)
	}
	ch.Send = wireEncoding(ch.Result.Plan.Compression, stored)
	ch.Modeled = ch.Result.Rate > 0 && ch.Result.Rate < 1e15
	return ch, nil
}

// chainMargin is how much faster than the best chain a tree or star must
// be predicted to run for -auto to choose it. On a switched network a
// chain carries one stream on every link, each node forwarding once, and
// only its pipeline's fill grows with the nodes; a tree loads each
// parent's link with several streams and wins only where the model sees
// the chain's relays, or its fill, cost more than the tree's fan-out.
// Those figures are within the model's margin of error (the prediction
// is held to 15%): in a lab shaped with tbf at 1 Gbit/s on 2 cores, -auto
// chose a 3-tree predicted 10-12% ahead of the chain, which ran at 87-96
// MB/s against the chain's 105-113. Where links alone bind both plans,
// the model's ranking stands: the links' figures are the sure ones.
const chainMargin = 1.15

// preferChain returns the best chain that pool allows (by its rate as
// rate tells) when chosen is a tree or star that does not beat it by
// chainMargin, unless links alone bind both.
func preferChain(pool []capacity.Result, allowed func(capacity.Compression) bool, chosen capacity.Result, rate func(capacity.Result) float64) (capacity.Result, bool) {
	if chosen.Plan.Tree.Kind == capacity.KindChain {
		return capacity.Result{}, false
	}
	var best capacity.Result
	found := false
	for _, r := range pool {
		if r.Plan.Tree.Kind == capacity.KindChain && allowed(r.Plan.Compression) && (!found || rate(r) > rate(best)) {
			best, found = r, true
		}
	}
	if !found || chainMargin*rate(best) < rate(chosen) || linkBound(best) && linkBound(chosen) {
		return capacity.Result{}, false
	}
	return best, true
}

// linkBound says whether only links (or a switch's backplane) bind r: a
// rate the links' figures set, which the bench reproduces within a few
// percent, unlike the CPU's.
func linkBound(r capacity.Result) bool {
	for _, c := range r.Binding {
		if c.Kind != capacity.LinkLimit && c.Kind != capacity.BackplaneLimit {
			return false
		}
	}
	return len(r.Binding) > 0
}

// A doubter rates plans as they would run should the figures the probes
// leave most in doubt cost more than they say: the codecs', and a crowded
// machine's CPU where its nodes did not measure what they cost each other.
// Plans are compared at those rates, so that a plan which leans on such
// figures must beat the others by more than they may be off.
type doubter struct {
	net, slow capacity.Network // slow: net with every codec at 1/codecDoubt its rate
	opt       capacity.Options
	rates     map[string]float64 // by plan, memoized
}

func newDoubter(net capacity.Network, opt capacity.Options) *doubter {
	return &doubter{net: net, slow: slowerCodecs(net, codecDoubt), opt: opt, rates: map[string]float64{}}
}

// codecDoubt is how much more than its figure a codec may cost in a cast.
// A node times its decoder alone on the standard sample, the source its
// compressing path alone on the image's samples; in a cast they share the
// caches and the cores with the relays, the writes and, on a machine the
// nodes share, each other, and no crowd probe measures that. In the
// emulated lab (2 cores) the source's compressing path cost 1.15-1.4× its
// figure, and a node's decoding of a stored zstd image 1.8× even with one
// node, where a raw stream's relay and write cost what the crowd measured.
// A plan that compresses where a raw one runs nearly as fast then ran at
// 75-95% of the raw one.
const codecDoubt = 1.5

// rate is r's rate at the doubted figures.
func (d *doubter) rate(r capacity.Result) float64 {
	key := fmt.Sprintf("%v %v %s", r.Plan.Tree.Parent, r.Plan.Hosts, r.Plan.Compression.Name())
	if v, ok := d.rates[key]; ok {
		return v
	}
	rate := r.Rate
	if slow, err := capacity.Evaluate(d.slow, r.Plan, d.opt); err == nil {
		rate = min(rate, slow.Rate)
	}
	for _, c := range r.Constraints {
		if doubted(d.net, c) && c.Coef > 0 {
			rate = min(rate, c.Cap/(crowdedCost*c.Coef))
		}
	}
	d.rates[key] = rate
	return rate
}

// whyNot says why chosen runs rather than the model's best.
func (d *doubter) whyNot(best, chosen capacity.Result) string {
	if c, ok := crowdedCPU(d.net, best); ok {
		return fmt.Sprintf("%s runs, not %s (%s MB/s): that one leans on the CPU of machine %s, which %d hosts share on %.0f cores, and one host timed those figures alone; at %.0f× their cost it would run at %s MB/s",
			planName(chosen), planName(best), mbps(best.Rate), c.Subject, c.Streams, c.Cap, crowdedCost, mbps(d.rate(best)))
	}
	return fmt.Sprintf("%s runs, not %s (%s MB/s): that one leans on its codecs (bound by %s), whose figures were timed alone; should they cost %.1f× as much in the cast, it would run at %s MB/s and this one at %s",
		planName(chosen), planName(best), mbps(best.Rate), best.Bottleneck, codecDoubt, mbps(d.rate(best)), mbps(d.rate(chosen)))
}

// slowerCodecs returns net with every host's compression and
// decompression rates divided by f.
func slowerCodecs(net capacity.Network, f float64) capacity.Network {
	net.Hosts = slices.Clone(net.Hosts)
	scale := func(rates map[string]float64) map[string]float64 {
		if rates == nil {
			return nil
		}
		out := make(map[string]float64, len(rates))
		for k, v := range rates {
			out[k] = v / f
		}
		return out
	}
	for i := range net.Hosts {
		cpu := &net.Hosts[i].Resources.CPU
		cpu.Compress, cpu.Decompress = scale(cpu.Compress), scale(cpu.Decompress)
	}
	return net
}

// crowdedCost is what the CPU figures of a crowded machine, one shared by
// more hosts than it has cores, may cost in truth when plans are compared.
// One host timed them alone on one thread; the hosts' context switches and
// the caches each loses to the others are not in them. In the emulated lab
// (2 cores) a node's decoding cost 1.8 times its lone figure with 9 hosts
// on the machine, 3.5 times with 25.
const crowdedCost = 2.0

// crowdedCPU returns the CPU constraint of a machine that more of the
// plan's hosts share than it has cores, and whose crowd was not measured.
func crowdedCPU(net capacity.Network, r capacity.Result) (capacity.Constraint, bool) {
	var worst capacity.Constraint
	for _, c := range r.Constraints {
		if doubted(net, c) && c.Coef > worst.Coef {
			worst = c
		}
	}
	return worst, worst.Coef > 0
}

// doubted reports whether c is the CPU of a crowded machine whose hosts'
// cost to each other nobody measured (its nodes, or a topology file).
func doubted(net capacity.Network, c capacity.Constraint) bool {
	return c.Kind == capacity.MachineCPULimit && float64(c.Streams) > c.Cap && net.Machines[c.Subject].Contention == 0 && !net.Machines[c.Subject].Crowded
}

// planName names a plan and its stream: "chain, zstd".
func planName(r capacity.Result) string {
	return r.Plan.Name() + ", " + r.Plan.Compression.Name()
}

// shapeTree is the operator's shape over n nodes; a chain by default.
func shapeTree(shape capacity.Kind, n, fanout int) capacity.Tree {
	switch shape {
	case capacity.KindStar:
		return capacity.Star(n)
	case capacity.KindTree:
		return capacity.NaryTree(n, fanout)
	}
	return capacity.Chain(n)
}

// fallbackChoice is the plan when the model cannot judge: the operator's
// shape (a chain by default), the image as stored unless told otherwise.
func fallbackChoice(names []string, shape capacity.Kind, fanout int, compress Compress, stored imaging.Encoding, why error) Choice {
	tree := shapeTree(shape, len(names)-1, fanout)
	send := stored
	switch {
	case compress == CompressNo:
		send = imaging.Raw
	case compress == CompressYes && !stored.Compressed():
		send = imaging.Zstd
	}
	comp := capacity.Compression{}
	if send.Compressed() {
		comp = capacity.Compression{Codec: send.String(), Factor: 2}
	}
	return Choice{
		Result: capacity.Result{Plan: capacity.Plan{Tree: tree, Hosts: names, Compression: comp}, Depth: tree.Depth()},
		Send:   send,
		Notes:  []string{fmt.Sprintf("no prediction: %v", why)},
	}
}

// printPreview shows every plan the model ranked and which one runs.
func printPreview(out io.Writer, ch Choice) {
	if len(ch.Ranked) > 0 {
		rows := capacity.Preview(ch.Ranked)
		chosen := ch.Result.Plan
		table := capacity.FormatPreview(rows)
		lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
		fmt.Fprintln(out, "\ncapacity model: predicted rate of each plan (MB/s of image, 10^6 B/s), best first")
		for i, line := range lines {
			mark := "  "
			if i > 0 && sameShape(ch.Ranked[i-1].Plan, chosen) {
				mark = "▶ "
			}
			fmt.Fprintf(out, "%s%s\n", mark, line)
		}
	}
	for _, n := range ch.Notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
}

func sameShape(a, b capacity.Plan) bool {
	return a.Tree.Kind == b.Tree.Kind && a.Tree.Fanout == b.Tree.Fanout &&
		a.Compression.Enabled() == b.Compression.Enabled() && slices.Equal(a.Hosts, b.Hosts)
}

// describeChoice is one line on the plan that runs.
func describeChoice(ch Choice) string {
	r := ch.Result
	how := "raw"
	if ch.Send.Compressed() {
		how = ch.Send.String()
	}
	if !ch.Modeled {
		return fmt.Sprintf("%s, %s", r.Plan.Name(), how)
	}
	return fmt.Sprintf("%s, %s: predicted %s MB/s, ETA %s (bottleneck: %s)",
		r.Plan.Name(), how, mbps(r.Rate), formatDuration(r.ETA), r.Bottleneck)
}

// probeFor is a node's probe under its name in the plan, or an empty probe
// (nothing modelled) when the node sent none.
func probeFor(name string, p *capacity.Probe) capacity.Probe {
	if p == nil {
		return capacity.Probe{Hostname: name}
	}
	q := *p
	q.Hostname = name
	return q
}

// sourceProbe turns the server's own report into the source's probe.
func sourceProbe(r probe.Report) capacity.Probe {
	p := r.Probe
	p.Hostname = SourceName
	return p
}

// resumePlan is the plan for a cast a previous server started: the same
// stream, along a chain from the node furthest on to the one furthest
// behind, so that each node's upstream is ahead of it and serves it from
// its history. Nodes that already have the whole image only await their
// verdict.
func (s *Server) resumePlan(ready []*nodeState) (Choice, error) {
	enc, err := imaging.ParseEncoding(s.resume.Encoding)
	if err != nil {
		return Choice{}, err
	}
	if enc != s.img.Encoding && enc.Compressed() && s.img.Encoding.Compressed() {
		return Choice{}, fmt.Errorf("the cast sent the image as %s, and %s cannot be sent so", enc, s.cfg.Image)
	}
	order := append([]*nodeState(nil), ready...)
	slices.SortStableFunc(order, func(a, b *nodeState) int {
		return cmp.Or(cmp.Compare(b.pos, a.pos), natural.Compare(a.name, b.name))
	})
	names := []string{SourceName}
	for _, n := range order {
		names = append(names, n.name)
	}
	comp := capacity.Compression{}
	if enc.Compressed() {
		comp = capacity.Compression{Codec: enc.String(), Factor: 2}
	}
	ch := Choice{
		Result: capacity.Result{Plan: capacity.Plan{Tree: capacity.Chain(len(order)), Hosts: names, Compression: comp}, Depth: len(order)},
		Send:   enc,
		Notes:  []string{"taking up a cast under way: each node gets only what it lacks"},
	}
	return ch, nil
}
