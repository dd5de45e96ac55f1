package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"dolly/dolly/probe"
	"dolly/imaging/blockmap"
	"dolly/internal/lab"
	"dolly/internal/testimage"
	"dolly/server"
)

// result is one measurement.
type result struct {
	runSpec
	predicted      float64   // MB/s: image bytes over the preview's ETA (dolly only)
	rate           float64   // MB/s: the preview's steady rate b
	measured       float64   // MB/s of image at the slowest node
	seconds        float64   // the slowest node's time
	perNode        []float64 // MB/s of each node (but the slow one)
	slowMeasured   float64   // MB/s of image at the slow node, in a run with one
	slowWire       float64   // MB/s of the stream (what its link carried) at the slow node
	lateMeasured   float64   // MB/s of image at the late node, from its joining
	farMeasured    float64   // MB/s of image at the far switch's slowest node (two switches)
	farWire        float64   // and of the stream, what the trunk carried to it
	streamBytes    int64     // what the source sent (dolly only)
	imageUsed      int64     // bytes of the image its block map keeps
	bottleneck     string
	chosen         string               // the plan that ran, e.g. "chain zstd" (dolly only)
	busy           float64              // the machine's busy cores while casting (dolly) or over the run, of cores
	steal          float64              // cores the hypervisor took from the machine over the run
	casts          []float64            // MB/s of each cast when the run is the median of several
	castsPredicted []float64            // and each cast's prediction
	joins          []float64            // seconds from the last join to the plan, of each cast
	joinParts      []map[string]float64 // where each cast's join went (server.Report.JoinParts)
	serverCPU      float64              // CPU seconds of dolly-server, start-up included
	nodesCPU       float64              // CPU seconds of every dolly node together
	streamCPU      float64              // of those, what the nodes' streams took (no join, no probes)
	cores          int
	err            string
}

func (r result) line() string {
	if r.err != "" {
		return fmt.Sprintf("%s  FAILED: %s", r.runSpec, r.err)
	}
	spec := r.runSpec.String()
	if r.topology == "auto" && r.chosen != "" {
		spec += " → " + r.chosen
	}
	s := fmt.Sprintf("%s  %6.2f MB/s per node (%5.1fs, %.1f of %d cores busy", spec, r.measured, r.seconds, r.busy, r.cores)
	if r.trunkMbit > 0 {
		s = fmt.Sprintf("%s  %6.2f MB/s per node on the source's switch, %.2f behind the trunk (%.2f of stream) (%5.1fs, %.1f of %d cores busy", spec, r.measured, r.farMeasured, r.farWire, r.seconds, r.busy, r.cores)
	}
	if r.late {
		s = fmt.Sprintf("%s  %6.2f MB/s per node, the late one %.2f from its start (%5.1fs, %.1f of %d cores busy", spec, r.measured, r.lateMeasured, r.seconds, r.busy, r.cores)
	}
	if r.slow {
		s = fmt.Sprintf("%s  %6.2f MB/s per node, the slow one %.2f (%.2f on its link) (%5.1fs, %.1f of %d cores busy", spec, r.measured, r.slowMeasured, r.slowWire, r.seconds, r.busy, r.cores)
	}
	if r.steal >= 0.05 {
		s += fmt.Sprintf(", %.1f stolen", r.steal)
	}
	if len(r.casts) > 1 {
		s += "; median of " + castsCell(r)
	}
	if r.nodesCPU > 0 {
		s += fmt.Sprintf("; CPU-s server %.1f, nodes %.1f", r.serverCPU, r.nodesCPU)
	}
	s += ")"
	if r.predicted > 0 {
		s += fmt.Sprintf("  predicted %6.2f (%+.1f%%, %s)", r.predicted, r.errorPercent(), r.bottleneck)
	}
	return s
}

// errorPercent is how far the prediction is from the measurement.
func (r result) errorPercent() float64 {
	if r.measured <= 0 {
		return 0
	}
	return (r.predicted - r.measured) / r.measured * 100
}

// labEnv is a running lab with its disks, shared by a group of runs.
type labEnv struct {
	lab      *lab.Lab
	opts     options
	topology string
	disks    map[string][]string // each image's disks, a node's each
	runs     int
	castEnd  time.Time // when the last dolly-server exited
}

// runTimeout bounds one run; the slowest planned runs take a few minutes.
const runTimeout = 15 * time.Minute

// run casts r once. verify compares the last node's target with the image
// afterwards, a check on the bench itself (the server checks every node's
// digest on every cast): a run's first cast is enough.
func (e *labEnv) run(ctx context.Context, r runSpec, img image, verify bool) result {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	e.runs++
	logDir := filepath.Join(e.opts.work, fmt.Sprintf("run%03d-%vmbit-%s", e.runs, r.mbit, r.method))
	os.MkdirAll(logDir, 0o755)
	if verify {
		// The disk already holds the image from earlier casts: a cast that
		// wrote nothing must not pass the check.
		if err := e.scribble(img, r.nodes-1); err != nil {
			return result{runSpec: r, err: err.Error()}
		}
	}
	// Every cast starts with the machine's disk caught up: the loop devices'
	// writes of earlier casts, still in the page cache, would otherwise be
	// written back during this one and slow whichever run comes late in
	// its group (-auto, always last, lost 10% to the forced plan it chose).
	syscall.Sync()
	var res result
	var err error
	start, cpu0 := time.Now(), probe.ReadCPUTimes()
	trace := traceCPU(50 * time.Millisecond)
	switch r.method {
	case "dolly":
		res, err = e.dolly(ctx, r, img, logDir)
	case "udpcast":
		res, err = e.udpcast(ctx, r, img, logDir)
	case "nc-chain":
		res, err = e.ncChain(ctx, r, img, logDir)
	default:
		err = fmt.Errorf("unknown method %q", r.method)
	}
	res.runSpec = r
	res.imageUsed = img.used
	used := probe.ReadCPUTimes().Sub(cpu0)
	res.busy = (used.Busy + used.Steal).Seconds() / time.Since(start).Seconds()
	res.steal = used.Steal.Seconds() / time.Since(start).Seconds()
	samples := trace()
	if r.method == "dolly" && err == nil {
		// While the image moves, leaving out the server's start-up (it
		// profiles the image) and the nodes' last syncs.
		span := time.Duration(res.seconds * float64(time.Second))
		if busy, err := samples.cores(e.castEnd.Add(-span*9/10), e.castEnd.Add(-span/10)); err == nil {
			res.busy = busy
		}
	}
	res.cores = runtime.NumCPU()
	want, through := img.castCheck(r)
	if err == nil && verify {
		err = e.check(img, r.nodes-1, want, through)
	}
	if err == nil && verify && dirtyImage(img.name) {
		// A used disk's image: every target, and its file system checks
		// clean with the file system's own tool.
		for node := range r.nodes - 1 {
			if err = e.check(img, node, want, through); err != nil {
				break
			}
		}
		for node := range r.nodes {
			if err == nil {
				err = fsCheck(imageSpecs[img.name].FS, e.disks[img.name][node], node)
			}
		}
	}
	if err != nil {
		res.err = err.Error()
	}
	return res
}

// processCPU is the CPU time a finished process used, or 0.
func processCPU(p *proc) float64 {
	st := p.cmd.ProcessState
	if st == nil {
		return 0
	}
	return (st.UserTime() + st.SystemTime()).Seconds()
}

// proc is a started lab process with its log.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	end  time.Time
	err  error
}

func (e *labEnv) start(ctx context.Context, h *lab.Host, log string, name string, args ...string) (*proc, error) {
	cmd := e.lab.Command(ctx, h, name, args...)
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	p := &proc{cmd: cmd, log: log, done: make(chan struct{})}
	if err := e.lab.Start(cmd); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		p.end = time.Now()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) wait() error {
	<-p.done
	if p.err != nil {
		b, _ := os.ReadFile(p.log)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return fmt.Errorf("%v: %s", p.err, lines[len(lines)-1])
	}
	return nil
}

// dolly casts with dolly-server and dolly, and takes the plan's prediction
// and every node's time from the server's report.
func (e *labEnv) dolly(ctx context.Context, r runSpec, img image, logDir string) (result, error) {
	var res result
	addr := e.lab.Server.IP.String() + ":9700"
	report := filepath.Join(logDir, "report.json")
	hosts := e.lab.Nodes[:r.nodes]
	var slowHost string
	if r.slow {
		slowHost = e.lab.Nodes[len(e.lab.Nodes)-1].Name
		hosts = append(slices.Clone(hosts), e.lab.Nodes[len(e.lab.Nodes)-1])
	}
	args := []string{"-nodes", fmt.Sprint(len(hosts)), "-yes", "-listen", addr,
		"-report", report, "-progress-interval", "30s"}
	if e.topology != "" {
		args = append(args, "-topology", e.topology)
	}
	switch {
	case r.topology == "auto":
		// As a user types it: the raw image, and the model decides.
		args = append(args, "-image", img.raw)
	case r.compression == "zstd":
		args = append(args, "-image", img.zst, "-compress", "yes")
	default:
		args = append(args, "-image", img.raw, "-compress", "no")
	}
	if r.allBlocks {
		args = append(args, "-zero-free")
	}
	switch r.topology {
	case "chain":
		args = append(args, "-chain")
	case "tree":
		args = append(args, "-tree", fmt.Sprint(r.fanout))
	case "star":
		args = append(args, "-star")
	}
	srv, err := e.start(ctx, e.lab.Server, filepath.Join(logDir, "server.log"), filepath.Join(e.opts.bin, "dolly-server"), args...)
	if err != nil {
		return res, err
	}
	var nodes []*proc
	for _, h := range hosts {
		i := slices.Index(e.lab.Nodes, h)
		p, err := e.start(ctx, h, filepath.Join(logDir, h.Name+".log"), filepath.Join(e.opts.bin, "dolly"),
			"-server", addr, "-target", e.disks[img.name][i], "-name", h.Name, "-join-timeout", "60s")
		if err != nil {
			return res, err
		}
		nodes = append(nodes, p)
	}
	var lateHost string
	if r.late {
		h := e.lab.Nodes[r.nodes]
		lateHost = h.Name
		if err := waitForLine(ctx, filepath.Join(logDir, "server.log"), "targets:", time.Minute); err != nil {
			return res, err
		}
		select {
		case <-time.After(lateAfter): // the scenario: a PC that booted late
		case <-ctx.Done():
			return res, ctx.Err()
		}
		p, err := e.start(ctx, h, filepath.Join(logDir, h.Name+".log"), filepath.Join(e.opts.bin, "dolly"),
			"-server", addr, "-target", e.disks[img.name][r.nodes], "-name", h.Name, "-join-timeout", "60s")
		if err != nil {
			return res, err
		}
		hosts = append(slices.Clone(hosts), h)
		nodes = append(nodes, p)
	}
	var errs []error
	for i, p := range nodes {
		if err := p.wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", hosts[i].Name, err))
		}
	}
	if err := srv.wait(); err != nil {
		errs = append(errs, fmt.Errorf("dolly-server: %w", err))
	}
	e.castEnd = srv.end
	res.serverCPU = processCPU(srv)
	for _, p := range nodes {
		res.nodesCPU += processCPU(p)
		res.streamCPU += loggedStreamCPU(p.log)
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return res, err
	}
	var rep server.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return res, err
	}
	if rep.Verified != len(hosts) {
		return res, fmt.Errorf("%d of %d nodes verified", rep.Verified, len(hosts))
	}
	// The preview predicts the rate b and the time of the whole cast (b,
	// the pipeline fill and the start-up); the time is what a node's
	// measured rate is made of, so the two compare like with like.
	if rep.Plan.ETASeconds > 0 {
		res.predicted = float64(img.size) / rep.Plan.ETASeconds / 1e6
	}
	res.rate, res.bottleneck = rep.Plan.PredictedMBps, rep.Plan.Bottleneck
	res.joins, res.joinParts = []float64{rep.JoinSeconds}, []map[string]float64{rep.JoinParts}
	res.streamBytes = rep.StreamBytes
	res.chosen = planName(rep.Plan)
	for _, n := range rep.Nodes {
		if n.Name == lateHost {
			res.lateMeasured = n.MBps
			continue
		}
		if r.trunkMbit > 0 && slices.IndexFunc(hosts, func(h *lab.Host) bool { return h.Name == n.Name }) >= len(hosts)/2 {
			if res.farMeasured == 0 || n.MBps < res.farMeasured {
				res.farMeasured = n.MBps
				res.farWire = float64(rep.StreamBytes) / n.Seconds / 1e6
			}
			continue
		}
		if n.Name == slowHost {
			res.slowMeasured = n.MBps
			if n.Seconds > 0 {
				res.slowWire = float64(rep.StreamBytes) / n.Seconds / 1e6
			}
			continue
		}
		res.perNode = append(res.perNode, n.MBps)
		res.seconds = max(res.seconds, n.Seconds)
	}
	res.measured = float64(img.size) / res.seconds / 1e6
	return res, nil
}

// loggedStreamCPU is the CPU time a node logged its stream took, or 0.
func loggedStreamCPU(log string) float64 {
	b, err := os.ReadFile(log)
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`msg="stream done".* cpu=(\S+)`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil {
		return 0
	}
	return d.Seconds()
}

// waitForLine waits until the file at path holds a line containing want,
// reading it again every tenth of a second, for at most limit.
func waitForLine(ctx context.Context, path, want string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(want)) {
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s shows no %q after %v", path, want, limit)
}

// scribble overwrites the head of a node's disk with a pattern no image
// holds there.
func (e *labEnv) scribble(img image, node int) error {
	f, err := os.OpenFile(e.disks[img.name][node], os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(bytes.Repeat([]byte{0x5a}, 1<<20), 0)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("scribbling on pc%02d's disk: %w", node+1, err)
	}
	return nil
}

// check compares one target (the last node's, the one furthest down the
// line) with the image, byte for byte, as a check on the bench itself.
func (e *labEnv) check(img image, node int, want string, through *blockmap.Map) error {
	got, err := testimage.SHA256(e.disks[img.name][node], img.size)
	if through != nil {
		got, err = sha256Through(e.disks[img.name][node], img.size, through)
	}
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("pc%02d's target differs from the image", node+1)
	}
	return nil
}

// fsCheck checks the file system on a node's target with its own tool,
// changing nothing: e2fsck -fn, ntfsfix -n, fsck.fat -n.
func fsCheck(fs, dev string, node int) error {
	var cmd *exec.Cmd
	switch fs {
	case "", "ext4":
		cmd = exec.Command("e2fsck", "-fn", dev)
	case "ntfs":
		cmd = exec.Command("ntfsfix", "-n", dev)
	case "fat32":
		cmd = exec.Command("fsck.fat", "-n", dev)
	default:
		return fmt.Errorf("no check for a %s file system", fs)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pc%02d: %s: %v: %s", node+1, strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// planName names the plan a report says ran: "chain zstd", "3-tree none".
func planName(p server.ReportPlan) string {
	shape := p.Topology
	if shape == "tree" {
		shape = fmt.Sprintf("%d-tree", p.Fanout)
	}
	return shape + " " + p.Compression
}
