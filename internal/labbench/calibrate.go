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
	"dolly/dolly"
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
	start := imaging.MachineCPU()
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
	cpu := (imaging.MachineCPU() - start).Seconds()
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
	start, cpu0 := time.Now(), imaging.MachineCPU()
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	n := <-received
	cpu := (imaging.MachineCPU() - cpu0).Seconds()
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
	// running every host at once are a large part of the cost.
	relayFit = costFit{compression: "none", what: "stream end",
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
// machine's contention, to what the casts cost the machine. Those casts'
// costs are the limit of the lab's larger casts. It returns the probe with
// the figures that could be fitted, the contention, and what could not.
//
// For an n-node chain the model's cost per image byte depends on the
// fitted figure x and the contention k (each host of m on the machine costs
// 1 + k·(m−1) times its own). It falls as x grows: the fits search x, and
// the pair searches k, for the cost each chain measured. The last fit's
// casts give the contention: with its x when it is quiet (its chain of hi
// nodes), else its x and k together (its chains of lo and hi nodes). The
// other fits take k and give their x from their chain of hi nodes. The
// figures depend on one another, so the fits go round a few times; they
// settle within three.
//
// Hosts that share two cores slow each other more than in proportion to
// their number: a chain of 8 may cost this machine more than twice a chain
// of 4 per byte. Without k, the fit either misses the smaller casts or the
// larger ones.
func fitCosts(ctx context.Context, env *labEnv, spec lab.Spec, probe capacity.Probe, fits []costFit, mbit float64, img image, lo, hi, reps int) (capacity.Probe, float64, error) {
	for _, fit := range fits {
		if fit.get(probe) <= 0 {
			return probe, 0, fmt.Errorf("the probe has no %s figure to start from", fit.what)
		}
	}
	m := newCostModel(ctx, env, spec, img)
	measured := make([][2]castCost, len(fits))
	for i, fit := range fits {
		if i == len(fits)-1 && !fit.quiet { // only the pair fits x and k together
			c, err := measureCost(ctx, env, m, probe, fit.compression, mbit, img, lo, reps)
			if err != nil {
				return probe, 0, err
			}
			measured[i][0] = c
		}
		c, err := measureCost(ctx, env, m, probe, fit.compression, mbit, img, hi, reps)
		if err != nil {
			return probe, 0, err
		}
		measured[i][1] = c
	}
	var k float64
	failed := make([]error, len(fits))
	for range 5 {
		for i, fit := range fits {
			if failed[i] != nil {
				continue
			}
			f, err := fitOneOf(m, probe, fit, k, measured[i], i == len(fits)-1)
			if err != nil {
				failed[i] = fmt.Errorf("%s: %w", fit.what, err)
				continue
			}
			k = f.k // unchanged but for the pair
			fit.set(&probe, f.x)
		}
	}
	return probe, k, errors.Join(failed...)
}

// fitResult is a figure and, from a pair of casts, the contention.
type fitResult struct{ x, k float64 }

// fitOneOf fits fit's figure to its casts with the model's present
// figures: with the contention too when pair is set, else at k.
func fitOneOf(m *costModel, p capacity.Probe, fit costFit, k float64, casts [2]castCost, pair bool) (fitResult, error) {
	excess := func(c castCost) func(x, k float64) (float64, error) {
		return func(x, k float64) (float64, error) {
			q := p
			fit.set(&q, x)
			cost, err := m.cost(q, fit.compression, c.n, k, c.held)
			return cost - c.perByte, err
		}
	}
	x0 := fit.get(p)
	if pair && fit.quiet {
		hi := excess(casts[1])
		k, err := fitContention(func(k float64) (float64, error) { return hi(x0, k) }, casts[1])
		if !errors.Is(err, errNoContention) {
			return fitResult{x0, k}, err
		}
		// Slower than the quiet figure even alone: fit the figure.
		x, err := fitOne(func(x float64) (float64, error) { return hi(x, 0) }, x0, casts[1])
		return fitResult{x, 0}, err
	}
	if !pair {
		hi := excess(casts[1])
		x, err := fitOne(func(x float64) (float64, error) { return hi(x, k) }, x0, casts[1])
		return fitResult{x, k}, err
	}
	x, k, err := fitPair(excess(casts[0]), excess(casts[1]), x0, casts[0], casts[1])
	return fitResult{x, k}, err
}

// costModel evaluates the model's machine coefficient of chains of the lab.
type costModel struct {
	env  *labEnv
	spec lab.Spec
	img  image
	// opt and profile are the model's options for the image as each
	// compression sends it, and its profile.
	opt     map[string]capacity.Options
	profile map[string]imaging.Profile
	err     error
}

func newCostModel(ctx context.Context, env *labEnv, spec lab.Spec, img image) *costModel {
	m := &costModel{env: env, spec: spec, img: img, opt: map[string]capacity.Options{}, profile: map[string]imaging.Profile{}}
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
// as compression says, with the lab described by probe and contention.
func (m *costModel) evaluate(p capacity.Probe, compression string, n int, contention float64) (capacity.Result, error) {
	if m.err != nil {
		return capacity.Result{}, m.err
	}
	data, err := m.env.lab.Topology(m.spec, p, contention)
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
func (m *costModel) cost(p capacity.Probe, compression string, n int, k float64, held bool) (float64, error) {
	r, err := m.evaluate(p, compression, n, k)
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
	r, err := m.evaluate(p, compression, n, 0)
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

// fitPair is the figure x and the contention k at which the model's costs
// of both chains are what the casts measured. When the model, fitted to
// the larger chain without contention, already counts the smaller one's
// cost or less, there is no contention to fit: k is 0.
func fitPair(lo, hi func(x, k float64) (float64, error), x0 float64, loCast, hiCast castCost) (x, k float64, err error) {
	excess := func(k float64) (float64, float64, error) {
		x, err := fitOne(func(x float64) (float64, error) { return hi(x, k) }, x0, hiCast)
		if err != nil {
			return 0, 0, err
		}
		e, err := lo(x, k)
		return e, x, err
	}
	e, x, err := excess(0)
	if err != nil || e <= 0 || loCast.n == hiCast.n {
		return x, 0, err
	}
	// The figure fitted to the larger chain alone makes the smaller one
	// dearer than it was: contention weighs on the larger chain more, so
	// as k grows the figure grows and the smaller chain's cost falls.
	// Bisect for the root up to the file's bound, 1.
	kLo, kHi := 0.0, 1.0
	if e, _, err := excess(kHi); err == nil && e > 0 {
		return 0, 0, fmt.Errorf("the chain of %d nodes cost %.3g CPU-s per GB, too little next to %d nodes' %.3g for any contention up to 1",
			loCast.n, loCast.perByte*1e9, hiCast.n, hiCast.perByte*1e9)
	}
	for range 30 {
		k := (kLo + kHi) / 2
		e, _, err := excess(k)
		if err != nil || e < 0 {
			kHi = k
		} else {
			kLo = k
		}
	}
	x, err = fitOne(func(x float64) (float64, error) { return hi(x, kLo) }, x0, hiCast)
	return x, kLo, err
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

// measureCost casts img along a chain of n nodes reps times and returns
// the machine's time per image byte at the median rate. A chain that fell
// well short of every limit but the machine's CPU was held back by the
// machine: all its cores count, the moments they sat idle too (on this
// machine a busy core waits for a sleeping one to wake, the more so the
// more hosts hand bytes to each other). Any other counts its busy cores.
func measureCost(ctx context.Context, env *labEnv, m *costModel, p capacity.Probe, compression string, mbit float64, img image, n, reps int) (castCost, error) {
	cores, others, err := m.limits(p, compression, n)
	if err != nil {
		return castCost{}, err
	}
	type cast struct{ rate, busy float64 }
	var casts []cast
	for rep := range reps {
		logDir := filepath.Join(env.opts.work, fmt.Sprintf("calibrate-%vmbit-%s-%d-%d", mbit, compression, n, rep))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return castCost{}, err
		}
		r := runSpec{method: "dolly", topology: "chain", fanout: 1, compression: compression, nodes: n, mbit: mbit, image: img.name}
		trace := traceCPU(50 * time.Millisecond)
		res, err := env.dolly(ctx, r, img, logDir)
		samples := trace()
		syscall.Sync()
		if err != nil {
			return castCost{}, fmt.Errorf("calibration cast of %d nodes: %w", n, err)
		}
		span := time.Duration(res.seconds * float64(time.Second))
		busy, err := samples.cores(env.castEnd.Add(-span*4/5), env.castEnd.Add(-span/5))
		if err != nil {
			return castCost{}, fmt.Errorf("calibration cast of %d nodes: %w", n, err)
		}
		c := cast{rate: float64(img.size) / res.seconds, busy: busy}
		casts = append(casts, c)
		fmt.Printf("labbench: calibration: chain of %d, %s: %.1f MB/s, %.2f cores busy\n", n, compression, c.rate/1e6, busy)
	}
	mid := medianBy(casts, func(c cast) float64 { return c.rate })
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
func castOptions(ctx context.Context, path string) (capacity.Options, imaging.Profile, error) {
	im, err := imaging.OpenImage(path)
	if err != nil {
		return capacity.Options{}, imaging.Profile{}, err
	}
	defer im.Close()
	if err := im.Scan(ctx, nil); err != nil { // a raw image needs none
		return capacity.Options{}, imaging.Profile{}, err
	}
	p, err := im.Profile(ctx)
	if err != nil {
		return capacity.Options{}, imaging.Profile{}, err
	}
	return server.Options(p, dolly.DefaultFrameSize), p, nil
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
			s.at, s.busy = append(s.at, time.Now()), append(s.busy, imaging.MachineCPU())
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
