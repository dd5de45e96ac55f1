package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
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
	var p capacity.Probe
	out, err := l.Command(ctx, l.Nodes[0], filepath.Join(bin, "dolly"), "probe", "-target", disks[0], "-compress",
		"-budget", "500ms", "-o", "json").Output()
	if err != nil {
		return p, fmt.Errorf("probing the lab: %w", err)
	}
	if err := json.Unmarshal(out, &p); err != nil {
		return p, fmt.Errorf("probing the lab: %w", err)
	}
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
	if w, err := sustainedWriteCost(ctx, disks[:min(4, len(disks))], 256<<20); err == nil {
		p.DiskWriteCPUBytesPerSec = w
	} else {
		return p, fmt.Errorf("measuring the lab's write path: %w", err)
	}
	return p, nil
}

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
}

var (
	// The relay's cost per stream byte: what the machine-wide CPU limit of
	// a larger cast is made of. A lone TCP stream (streamCost) misses the
	// relays' pipes, wake-ups and context switches, which on a machine
	// running every host at once are a large part of the cost.
	relayFit = costFit{compression: "none", what: "stream end",
		get: func(p capacity.Probe) float64 { return p.NetStreamBytesPerSec },
		set: func(p *capacity.Probe, v float64) { p.NetStreamBytesPerSec = v }}
	// The decoder's cost per raw byte while every node decodes at once:
	// the probe times one decoder on a quiet machine.
	decodeFit = costFit{compression: "zstd", what: "zstd decoder",
		get: func(p capacity.Probe) float64 { return p.DecompressBytesPerSec["zstd"] },
		set: func(p *capacity.Probe, v float64) {
			p.DecompressBytesPerSec = maps.Clone(p.DecompressBytesPerSec)
			p.DecompressBytesPerSec["zstd"] = v
		}}
)

// calibrateCost casts img along chains of lo and hi nodes and fits one
// figure x of the probe (fit) to the machine's CPU in those casts, the
// limit of the lab's larger casts.
//
// For an n-node chain the model's machine CPU coefficient is A(n) + B(n)/x
// (seconds of CPU per image byte), A being all else the model counts. Each
// cast's measured CPU per image byte m(n) is taken over the middle of its
// transfer, leaving out the start-up (the server profiles the image) and
// the end. The two casts fit the slope, the cost each added node brings:
//
//	x = (B(hi) − B(lo)) / (m(hi) − m(lo) − (A(hi) − A(lo)))
//
// so what the machine spends whatever the cast's size (the bench itself,
// the server's reading, daemons) is not charged to every node, as a fit
// from one cast would. The runs are predictions from it.
func calibrateCost(ctx context.Context, env *labEnv, spec lab.Spec, probe capacity.Probe, fit costFit, mbit float64, img image, lo, hi int) (float64, error) {
	path := img.raw
	if fit.compression == "zstd" {
		path = img.zst
	}
	opt, profile, err := castOptions(ctx, path)
	if err != nil {
		return 0, err
	}
	plan := capacity.Plan{Hosts: []string{"dolly-server"}}
	if fit.compression == "zstd" {
		plan.Compression = opt.Compression
	}
	coef := func(n int, x float64) (float64, error) {
		p := probe
		fit.set(&p, x)
		data, err := env.lab.Topology(spec, p)
		if err != nil {
			return 0, err
		}
		t, err := capacity.ParseTopology(data)
		if err != nil {
			return 0, err
		}
		// As the server does: this image decodes at its own speed, not the
		// standard sample's, and the lab's probe stands for the server's.
		server.ScaleDecode(&t.Network, opt.Compression.Codec, server.DecodeFactor(profile))
		pl := plan
		pl.Tree = capacity.Chain(n)
		for _, h := range env.lab.Nodes[:n] {
			pl.Hosts = append(pl.Hosts, h.Name)
		}
		r, err := capacity.Evaluate(t.Network, pl, opt)
		if err != nil {
			return 0, err
		}
		for _, c := range r.Constraints {
			if c.Kind == capacity.MachineCPULimit {
				return c.Coef, nil
			}
		}
		return 0, errors.New("the model has no machine CPU limit for the lab")
	}
	// model returns A(n) and B(n) from the coefficient at two values of x.
	model := func(n int) (a, b float64, err error) {
		x1 := fit.get(probe)
		x2 := 2 * x1
		c1, err := coef(n, x1)
		if err != nil {
			return 0, 0, err
		}
		c2, err := coef(n, x2)
		if err != nil {
			return 0, 0, err
		}
		b = (c1 - c2) / (1/x1 - 1/x2)
		return c1 - b/x1, b, nil
	}
	measure := func(n int) (float64, error) {
		logDir := filepath.Join(env.opts.work, fmt.Sprintf("calibrate-%vmbit-%s-%d", mbit, fit.compression, n))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return 0, err
		}
		r := runSpec{method: "dolly", topology: "chain", fanout: 1, compression: fit.compression, nodes: n, mbit: mbit, image: img.name}
		trace := traceCPU(50 * time.Millisecond)
		res, err := env.dolly(ctx, r, img, logDir)
		samples := trace()
		syscall.Sync()
		if err != nil {
			return 0, fmt.Errorf("calibration cast of %d nodes: %w", n, err)
		}
		span := time.Duration(res.seconds * float64(time.Second))
		cores, err := samples.cores(env.castEnd.Add(-span*4/5), env.castEnd.Add(-span/5))
		if err != nil {
			return 0, fmt.Errorf("calibration cast of %d nodes: %w", n, err)
		}
		return cores / (float64(img.size) / res.seconds), nil
	}
	if fit.get(probe) <= 0 {
		return 0, fmt.Errorf("the probe has no %s figure to start from", fit.what)
	}
	aLo, bLo, err := model(lo)
	if err != nil {
		return 0, err
	}
	aHi, bHi, err := model(hi)
	if err != nil {
		return 0, err
	}
	mLo, err := measure(lo)
	if err != nil {
		return 0, err
	}
	mHi, err := measure(hi)
	if err != nil {
		return 0, err
	}
	dm, da, db := mHi-mLo, aHi-aLo, bHi-bLo
	if dm <= da || db <= 0 {
		return 0, fmt.Errorf("calibration casts: %d nodes cost %.3g CPU-s per byte more than %d, within the model's %.3g for all but the %s", hi, dm, lo, da, fit.what)
	}
	return db / (dm - da), nil
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
