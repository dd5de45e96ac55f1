package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"dolly/capacity"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/lab"
	"dolly/server"
)

// calibrate probes the lab once, on a quiet machine: a node's probe of one
// of the lab's disks, with the cost of a TCP stream across the lab's own
// path (veth, bridge, shaper) in place of the probe's loopback figure, and
// the cost of the write path under a sustained load in place of the
// probe's short one. All hosts are one machine, so one probe describes
// them all.
func calibrate(ctx context.Context, l *lab.Lab, bin string, disks []string) (capacity.Probe, error) {
	// The codecs' figures set the limit of every compressed cast, and one
	// timing of half a second read from 949 to 1466 MB/s per core between
	// benches: the median of three probes.
	var probes []capacity.Probe
	for range 3 {
		var q capacity.Probe
		out, err := l.Command(ctx, l.Nodes[0], filepath.Join(bin, "dolly"), "probe", "-target", disks[0], "-compress",
			"-budget", "500ms", "-o", "json").Output()
		if err != nil {
			return q, fmt.Errorf("probing the lab: %w", err)
		}
		if err := json.Unmarshal(out, &q); err != nil {
			return q, fmt.Errorf("probing the lab: %w", err)
		}
		probes = append(probes, q)
	}
	p := probes[0]
	p.DecompressBytesPerSec = medianRates(probes, func(q capacity.Probe) map[string]float64 { return q.DecompressBytesPerSec })
	p.CompressBytesPerSec = medianRates(probes, func(q capacity.Probe) map[string]float64 { return q.CompressBytesPerSec })
	var zstd []float64
	for _, q := range probes {
		zstd = append(zstd, q.DecompressBytesPerSec["zstd"])
	}
	fmt.Printf("labbench: zstd decode: %.0f MB/s per core (median of %s)\n", p.DecompressBytesPerSec["zstd"]/1e6, mbList(zstd))
	p.Hostname, p.NICBytesPerSec = "", 0 // hosts are named, links given, by the topology
	peer := l.Server
	if len(l.Nodes) > 1 {
		peer = l.Nodes[1]
	}
	rate, err := streamCost(ctx, l.Nodes[0], peer, p.MemcpyBytesPerSec, 2*time.Second)
	if err != nil {
		return p, fmt.Errorf("measuring the lab's TCP path: %w", err)
	}
	p.NetStreamBytesPerSec = rate
	// A node's probe writes a little and syncs; a cast writes for minutes,
	// and on this machine every lab disk is a loop device over a file on
	// one file system, whose loop workers and host file system cost more
	// CPU under a sustained load than the probe sees.
	// One such write can be off by half when the machine is busy for a
	// moment: the median of three.
	var writes []float64
	for range 3 {
		w, err := sustainedWriteCost(ctx, disks[:min(4, len(disks))], scratchSize)
		if err != nil {
			return p, fmt.Errorf("measuring the lab's write path: %w", err)
		}
		writes = append(writes, w)
	}
	p.DiskWriteCPUBytesPerSec = medianBy(writes, func(w float64) float64 { return w })
	fmt.Printf("labbench: write path: %.0f MB per CPU-second (median of %s)\n", p.DiskWriteCPUBytesPerSec/1e6, mbList(writes))
	return p, nil
}

// medianRates is, codec by codec, the median of the probes' rates.
func medianRates(probes []capacity.Probe, rates func(capacity.Probe) map[string]float64) map[string]float64 {
	if len(rates(probes[0])) == 0 {
		return nil
	}
	out := map[string]float64{}
	for codec := range rates(probes[0]) {
		var xs []float64
		for _, q := range probes {
			if v, ok := rates(q)[codec]; ok {
				xs = append(xs, v)
			}
		}
		out[codec] = medianBy(xs, func(v float64) float64 { return v })
	}
	return out
}

// scratchSize is the size of the probe's scratch disks, all of which its
// sustained write covers: the first of its writes allocates their blocks,
// the median of three is a write to allocated ones, as a cast's are.
const scratchSize = 256 << 20

// sustainedWriteCost writes n bytes to each disk at once, the way a cast
// does (imaging's target, with O_DIRECT), syncs them, and returns the bytes
// the machine writes per CPU-second along the way.
func sustainedWriteCost(ctx context.Context, disks []string, n int64) (float64, error) {
	buf := make([]byte, 1<<20)
	rand.Read(buf) // incompressible, and not zeros a disk could skip
	start := probe.MachineCPU()
	errs := make(chan error, len(disks))
	for _, d := range disks {
		go func() {
			f, err := imaging.OpenTarget(d, n, imaging.TargetOptions{Direct: true})
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			for off := int64(0); off < n && ctx.Err() == nil; off += int64(len(buf)) {
				if _, err := f.WriteAt(buf, off); err != nil {
					errs <- err
					return
				}
			}
			errs <- f.Sync()
		}()
	}
	for range disks {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	cpu := (probe.MachineCPU() - start).Seconds()
	if cpu <= 0 {
		return 0, errors.New("too fast to measure")
	}
	return float64(n) * float64(len(disks)) / cpu, nil
}

// streamCost sends from a to b for about d and returns the rate one core
// carries one TCP stream across the lab at: the machine's CPU time, less a
// copy at each end, covers a send and a receive.
func streamCost(ctx context.Context, a, b *lab.Host, copyRate float64, d time.Duration) (float64, error) {
	var ln net.Listener
	if err := lab.InNamespace(b, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.IP.String(), "0"))
		return err
	}); err != nil {
		return 0, err
	}
	defer ln.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- 0
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	var c net.Conn
	if err := lab.InNamespace(a, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	start, cpu0 := time.Now(), probe.MachineCPU()
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	n := <-received
	cpu := (probe.MachineCPU() - cpu0).Seconds()
	c.Close()
	if n == 0 {
		return 0, errors.New("nothing arrived")
	}
	if copyRate > 0 {
		cpu -= 2 * float64(n) / copyRate
	}
	if cpu <= 0 {
		return 0, errors.New("too fast to measure")
	}
	return 2 * float64(n) / cpu, nil
}

// A costFit names a figure of the lab's probe that calibration casts fit:
// the cost of a relayed stream byte, or of a decoded one.
type costFit struct {
	compression string // the casts' stream: "none" or "zstd"
	what        string // for messages
	get         func(capacity.Probe) float64
	set         func(*capacity.Probe, float64)
	// pair says the figure is fitted to chains of two lengths, together
	// with the machine's cost per cast (what a shorter chain costs beyond
	// its share of a longer one).
	pair bool
	// quiet says the figure stays the probe's, timed on a quiet machine,
	// as long as the contention can account for what the casts cost: it
	// also sets a limit of one thread, which sharing cores does not
	// change. The casts then fit the contention alone.
	quiet bool
}

var (
	// The relay's cost per stream byte: what the machine-wide CPU limit of
	// a larger cast is made of. A lone TCP stream (streamCost) misses the
	// relays' pipes, wake-ups and context switches, which on a machine
	// running every host at once are a large part of the cost. Chains of
	// 4 and 8 nodes at 1 Gbit/s cost 7.5 and 10.8 CPU-s per GB of image:
	// about 0.8 a node and 4 for the cast, which the relay's figure alone
	// cannot split.
	relayFit = costFit{compression: "none", what: "stream end", pair: true,
		get: func(p capacity.Probe) float64 { return p.NetStreamBytesPerSec },
		set: func(p *capacity.Probe, v float64) { p.NetStreamBytesPerSec = v }}
	// The decoder's cost per raw byte. The probe times one decoder on a
	// quiet machine, which is what a lone node's decoding thread runs at
	// (a figure fitted to every node decoding at once on two cores held
	// the lone one to 80% of its speed); what decoding on shared cores
	// costs more is the machine's contention.
	decodeFit = costFit{compression: "zstd", what: "zstd decoder", quiet: true,
		get: func(p capacity.Probe) float64 { return p.DecompressBytesPerSec["zstd"] },
		set: func(p *capacity.Probe, v float64) {
			p.DecompressBytesPerSec = maps.Clone(p.DecompressBytesPerSec)
			p.DecompressBytesPerSec["zstd"] = v
		}}
)

// A castCost is what a calibration cast measured: the machine's time per
// image byte of a chain of n nodes, the median of a few casts. held says
// the machine held the chain back: all its cores count, and the model's
// rate is to match the chain's, piece by piece of the image. Otherwise
// only busy cores count, and the model's CPU coefficient is to match them.
type castCost struct {
	n       int
	perByte float64 // seconds of the machine's cores per image byte
	held    bool
}

// fitCosts casts img along chains of lo and hi nodes, raw and compressed as
// the fits say, and fits the figures of the probe the fits name, and the
// machine's costs, to what the casts cost the machine. Those casts' costs
// are the limit of the lab's larger casts. It returns the probe with the
// figures that could be fitted, the machine's costs, and what could not.
//
// For an n-node chain the model's cost per image byte depends on the
// fitted figure x and the machine's costs: the contention k (each host of
// m on the machine costs 1 + k·(m−1) times its own) and the cast cost f
// (paid once per byte sent). It falls as x grows. A pair fit searches x
// for the cost of its chain of hi nodes and f for that of its chain of lo
// nodes; a quiet fit keeps x and searches k for its chain of hi nodes;
// any other fit searches x alone. The figures depend on one another, so
// the fits go round a few times; they settle within three.
func fitCosts(ctx context.Context, env *labEnv, spec lab.Spec, probe capacity.Probe, fits []costFit, mbit float64, img image, lo, hi, reps int) (capacity.Probe, lab.MachineCosts, error) {
	var mc lab.MachineCosts
	for _, fit := range fits {
		if fit.get(probe) <= 0 {
			return probe, mc, fmt.Errorf("the probe has no %s figure to start from", fit.what)
		}
	}
	m := newCostModel(ctx, env, spec, img)
	// The chains take turns, a cast of each per round: the machine's
	// speed drifts by 15% over minutes, and the pair's cast cost is the
	// difference of two chains, which casts minutes apart would make
	// mostly drift.
	type chain struct {
		fit, slot int // measured[fit][slot]
		n         int
		casts     []calibrationCast
	}
	var chains []*chain
	for i, fit := range fits {
		if fit.pair && lo < hi {
			chains = append(chains, &chain{fit: i, slot: 0, n: lo})
		}
		chains = append(chains, &chain{fit: i, slot: 1, n: hi})
	}
	for rep := range reps {
		for _, c := range chains {
			cast, err := castForCost(ctx, env, fits[c.fit].compression, mbit, img, c.n, rep)
			if err != nil {
				return probe, mc, err
			}
			c.casts = append(c.casts, cast)
		}
	}
	measured := make([][2]castCost, len(fits))
	for _, c := range chains {
		cost, err := costOf(m, probe, fits[c.fit].compression, c.n, c.casts)
		if err != nil {
			return probe, mc, err
		}
		measured[c.fit][c.slot] = cost
	}
	failed := make([]error, len(fits))
	for range 5 {
		for i, fit := range fits {
			if failed[i] != nil {
				continue
			}
			x, err := fitOneOf(m, probe, fit, &mc, measured[i])
			if err != nil {
				failed[i] = fmt.Errorf("%s: %w", fit.what, err)
				continue
			}
			fit.set(&probe, x)
		}
	}
	return probe, mc, errors.Join(failed...)
}

// fitOneOf fits fit's figure to its casts with the model's present figures
// and returns it, and updates the machine's cost the fit also gives: the
// cast cost of a pair, the contention of a quiet fit.
func fitOneOf(m *costModel, p capacity.Probe, fit costFit, mc *lab.MachineCosts, casts [2]castCost) (float64, error) {
	excess := func(c castCost) func(x float64, mc lab.MachineCosts) (float64, error) {
		return func(x float64, mc lab.MachineCosts) (float64, error) {
			q := p
			fit.set(&q, x)
			cost, err := m.cost(q, fit.compression, c.n, mc, c.held)
			return cost - c.perByte, err
		}
	}
	x0 := fit.get(p)
	hi := excess(casts[1])
	switch {
	case fit.quiet:
		k, err := fitContention(func(k float64) (float64, error) {
			with := *mc
			with.Contention = k
			return hi(x0, with)
		}, casts[1])
		if !errors.Is(err, errNoContention) {
			mc.Contention = k
			return x0, err
		}
		// Slower than the quiet figure even alone: fit the figure.
		mc.Contention = 0
		return fitOne(func(x float64) (float64, error) { return hi(x, *mc) }, x0, casts[1])
	case fit.pair && casts[0].n > 0:
		lo := excess(casts[0])
		at := func(f float64) lab.MachineCosts {
			with := *mc
			with.CastCPUPerGB = f
			return with
		}
		x, f, err := fitCastPair(func(x, f float64) (float64, error) { return lo(x, at(f)) },
			func(x, f float64) (float64, error) { return hi(x, at(f)) }, x0, casts[0], casts[1])
		if err == nil {
			mc.CastCPUPerGB = f
		}
		return x, err
	}
	return fitOne(func(x float64) (float64, error) { return hi(x, *mc) }, x0, casts[1])
}

// costModel evaluates the model's machine coefficient of chains of the lab.
type costModel struct {
	env  *labEnv
	spec lab.Spec
	img  image
	// opt and profile are the model's options for the image as each
	// compression sends it, and its profile.
	opt     map[string]capacity.Options
	profile map[string]probe.Profile
	err     error
}

func newCostModel(ctx context.Context, env *labEnv, spec lab.Spec, img image) *costModel {
	m := &costModel{env: env, spec: spec, img: img, opt: map[string]capacity.Options{}, profile: map[string]probe.Profile{}}
	for comp, path := range map[string]string{"none": img.raw, "zstd": img.zst} {
		opt, profile, err := castOptions(ctx, path)
		if err != nil {
			m.err = err
		}
		m.opt[comp], m.profile[comp] = opt, profile
	}
	return m
}

// evaluate is the model's result for a chain of n nodes casting the image
// as compression says, with the lab described by probe and the machine's
// costs.
func (m *costModel) evaluate(p capacity.Probe, compression string, n int, mc lab.MachineCosts) (capacity.Result, error) {
	if m.err != nil {
		return capacity.Result{}, m.err
	}
	data, err := m.env.lab.Topology(m.spec, p, mc)
	if err != nil {
		return capacity.Result{}, err
	}
	t, err := capacity.ParseTopology(data)
	if err != nil {
		return capacity.Result{}, err
	}
	opt := m.opt[compression]
	// As the server does: this image decodes at its own speed, not the
	// standard sample's, and the lab's probe stands for the server's.
	server.ScaleDecode(&t.Network, opt.Compression.Codec, server.DecodeFactor(m.profile[compression]))
	plan := capacity.Plan{Hosts: []string{"dolly-server"}, Tree: capacity.Chain(n)}
	if compression != "none" {
		plan.Compression = opt.Compression
	}
	for _, h := range m.env.lab.Nodes[:n] {
		plan.Hosts = append(plan.Hosts, h.Name)
	}
	return capacity.Evaluate(t.Network, plan, opt)
}

// cost is the model's cost of a chain of n nodes per image byte, in
// seconds of the machine's cores: of all its cores at the model's rate for
// a chain held back by the machine, else the machine's CPU coefficient.
func (m *costModel) cost(p capacity.Probe, compression string, n int, mc lab.MachineCosts, held bool) (float64, error) {
	r, err := m.evaluate(p, compression, n, mc)
	if err != nil {
		return 0, err
	}
	c, err := machineLimit(r)
	if err != nil {
		return 0, err
	}
	if held {
		return c.Cap / r.Rate, nil
	}
	return c.Coef, nil
}

// limits are the machine's cores and the rate every other limit allows a
// chain of n nodes.
func (m *costModel) limits(p capacity.Probe, compression string, n int) (cores, others float64, err error) {
	r, err := m.evaluate(p, compression, n, lab.MachineCosts{})
	if err != nil {
		return 0, 0, err
	}
	c, err := machineLimit(r)
	if err != nil {
		return 0, 0, err
	}
	others = math.Inf(1)
	for _, c := range r.Constraints {
		if c.Kind != capacity.MachineCPULimit {
			others = min(others, c.Bound())
		}
	}
	return c.Cap, others, nil
}

// machineLimit is the model's machine CPU limit in a result.
func machineLimit(r capacity.Result) (capacity.Constraint, error) {
	for _, c := range r.Constraints {
		if c.Kind == capacity.MachineCPULimit {
			return c, nil
		}
	}
	return capacity.Constraint{}, errors.New("the model has no machine CPU limit for the lab")
}

// fitSpan is how far from the probe's figure a fit looks, either way.
const fitSpan = 64

// fitOne is the figure x at which excess, the model's cost of c's chain
// less what c measured, is 0. The cost falls as x grows; the search is
// over x0/fitSpan to x0·fitSpan, halving the ratio between its ends.
func fitOne(excess func(x float64) (float64, error), x0 float64, c castCost) (float64, error) {
	lo, hi := x0/fitSpan, x0*fitSpan
	e, err := excess(hi)
	if err != nil {
		return 0, err
	}
	if e > 0 {
		return 0, fmt.Errorf("the chain of %d nodes cost %.3g CPU-s per GB, less than the model counts with the figure at %.3g",
			c.n, c.perByte*1e9, hi)
	}
	if e, err = excess(lo); err != nil {
		return 0, err
	}
	if e < 0 {
		return 0, fmt.Errorf("the chain of %d nodes cost %.3g CPU-s per GB, more than the model counts with the figure at %.3g",
			c.n, c.perByte*1e9, lo)
	}
	for hi/lo > 1+1e-6 {
		mid := math.Sqrt(lo * hi)
		e, err := excess(mid)
		if err != nil {
			return 0, err
		}
		if e > 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Sqrt(lo * hi), nil
}

// fitCastPair is the figure x and the machine's cast cost f (CPU-s per GB
// sent) at which the model's costs of both chains are what the casts
// measured. When the model, fitted to the larger chain without a cast
// cost, already counts the smaller one's cost or more, there is no cast
// cost to fit: f is 0.
func fitCastPair(lo, hi func(x, f float64) (float64, error), x0 float64, loCast, hiCast castCost) (x, f float64, err error) {
	excess := func(f float64) (float64, float64, error) {
		x, err := fitOne(func(x float64) (float64, error) { return hi(x, f) }, x0, hiCast)
		if err != nil {
			return 0, 0, err
		}
		e, err := lo(x, f)
		return e, x, err
	}
	e, x, err := excess(0)
	if err != nil || e >= 0 || loCast.n == hiCast.n {
		return x, 0, err
	}
	// The smaller chain costs more than its share of the larger one. As f
	// grows, the figure fitted to the larger chain grows, and the smaller
	// chain, which has fewer hosts to gain by it, costs more. Bisect for
	// the root below a cost per GB sent that would leave the larger chain
	// nothing for its hosts: there the figure is out of reach.
	fLo, fHi := 0.0, 64*hiCast.perByte*1e9
	for range 50 {
		f := (fLo + fHi) / 2
		e, _, err := excess(f)
		if err != nil || e > 0 {
			fHi = f
		} else {
			fLo = f
		}
	}
	// The root, or the edge of reach if there is none.
	if e, x, err = excess(fLo); err != nil {
		return 0, 0, err
	}
	if e < -1e-3*loCast.perByte {
		return 0, 0, fmt.Errorf("the chain of %d nodes cost %.3g CPU-s per GB, too much next to %d nodes' %.3g for any cast cost",
			loCast.n, loCast.perByte*1e9, hiCast.n, hiCast.perByte*1e9)
	}
	return x, fLo, nil
}

// errNoContention says a cast cost no more than the model counts without
// contention.
var errNoContention = errors.New("no contention")

// fitContention is the contention k at which excess, the model's cost of
// c's chain less what c measured, is 0. The cost grows with k; k is sought
// up to the file's bound, 1.
func fitContention(excess func(k float64) (float64, error), c castCost) (float64, error) {
	e, err := excess(0)
	if err != nil {
		return 0, err
	}
	if e >= 0 {
		return 0, errNoContention
	}
	if e, err = excess(1); err != nil {
		return 0, err
	}
	if e < 0 {
		return 0, fmt.Errorf("the chain of %d nodes cost %.3g CPU-s per GB, more than the model counts with any contention up to 1",
			c.n, c.perByte*1e9)
	}
	lo, hi := 0.0, 1.0
	for range 40 {
		mid := (lo + hi) / 2
		e, err := excess(mid)
		if err != nil {
			return 0, err
		}
		if e < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2, nil
}

// A calibrationCast is one calibration cast's rate, in image bytes per
// second, and the machine's cores busy while the image moved.
type calibrationCast struct{ rate, busy float64 }

// castForCost casts img along a chain of n nodes once, for a cost.
func castForCost(ctx context.Context, env *labEnv, compression string, mbit float64, img image, n, rep int) (calibrationCast, error) {
	logDir := filepath.Join(env.opts.work, fmt.Sprintf("calibrate-%vmbit-%s-%d-%d", mbit, compression, n, rep))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return calibrationCast{}, err
	}
	r := runSpec{method: "dolly", topology: "chain", fanout: 1, compression: compression, nodes: n, mbit: mbit, image: img.name}
	trace := traceCPU(50 * time.Millisecond)
	res, err := env.dolly(ctx, r, img, logDir)
	samples := trace()
	syscall.Sync()
	if err != nil {
		return calibrationCast{}, fmt.Errorf("calibration cast of %d nodes: %w", n, err)
	}
	span := time.Duration(res.seconds * float64(time.Second))
	busy, err := samples.cores(env.castEnd.Add(-span*4/5), env.castEnd.Add(-span/5))
	if err != nil {
		return calibrationCast{}, fmt.Errorf("calibration cast of %d nodes: %w", n, err)
	}
	c := calibrationCast{rate: float64(img.size) / res.seconds, busy: busy}
	fmt.Printf("labbench: calibration: chain of %d, %s: %.1f MB/s, %.2f cores busy\n", n, compression, c.rate/1e6, busy)
	return c, nil
}

// costOf is the machine's time per image byte of a chain of n nodes at
// the median rate of its casts. A chain that fell well short of every
// limit but the machine's CPU was held back by the machine: all its cores
// count, the moments they sat idle too (on this machine a busy core waits
// for a sleeping one to wake, the more so the more hosts hand bytes to
// each other). Any other counts its busy cores.
func costOf(m *costModel, p capacity.Probe, compression string, n int, casts []calibrationCast) (castCost, error) {
	cores, others, err := m.limits(p, compression, n)
	if err != nil {
		return castCost{}, err
	}
	mid := medianBy(casts, func(c calibrationCast) float64 { return c.rate })
	used, how := mid.busy, "busy cores"
	if mid.rate < 0.9*others {
		used, how = cores, fmt.Sprintf("all %g cores: held back by the machine, links allow %.0f MB/s", cores, others/1e6)
	}
	c := castCost{n: n, perByte: used / mid.rate, held: used == cores}
	fmt.Printf("labbench: calibration: chain of %d, %s, median %.1f MB/s: %.2f CPU-s per GB (%s)\n",
		n, compression, mid.rate/1e6, c.perByte*1e9, how)
	return c, nil
}

// castOptions are the model's options for casting the image at path, and
// its profile, as the server finds them.
func castOptions(ctx context.Context, path string) (capacity.Options, probe.Profile, error) {
	im, err := imaging.OpenImage(path)
	if err != nil {
		return capacity.Options{}, probe.Profile{}, err
	}
	defer im.Close()
	p, err := probe.Image(ctx, im, nil)
	if err != nil {
		return capacity.Options{}, probe.Profile{}, err
	}
	return server.Options(p, stream.DefaultFrameSize), p, nil
}

// cpuSamples are the machine's busy time at moments.
type cpuSamples struct {
	at   []time.Time
	busy []time.Duration
}

// traceCPU samples the machine's busy time every interval until the
// returned function is called, which returns the samples.
func traceCPU(every time.Duration) func() cpuSamples {
	var s cpuSamples
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.at, s.busy = append(s.at, time.Now()), append(s.busy, probe.MachineCPU())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() cpuSamples {
		close(stop)
		<-done
		return s
	}
}

// cores is how many cores were busy on average from a to b.
func (s cpuSamples) cores(a, b time.Time) (float64, error) {
	i, j := -1, -1
	for k, t := range s.at {
		if i < 0 && !t.Before(a) {
			i = k
		}
		if !t.After(b) {
			j = k
		}
	}
	if i < 0 || j <= i {
		return 0, errors.New("too short to sample")
	}
	return (s.busy[j] - s.busy[i]).Seconds() / s.at[j].Sub(s.at[i]).Seconds(), nil
}

// mbList formats byte counts in MB (10^6), comma-separated.
func mbList(bytes []float64) string {
	var parts []string
	for _, b := range bytes {
		parts = append(parts, fmt.Sprintf("%.0f", b/1e6))
	}
	return strings.Join(parts, ", ")
}
