package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"dolly/internal/lab"
)

// ncChain streams the raw image along nc | tee | nc relays: every node
// listens, tees the stream onto its disk and sends it on.
func (e *labEnv) ncChain(ctx context.Context, r runSpec, img image, logDir string) (result, error) {
	var res result
	const port = "9800"
	nodes := e.lab.Nodes[:r.nodes]
	procs := make([]*proc, len(nodes))
	// The last node first, so every relay finds its successor listening.
	for i := len(nodes) - 1; i >= 0; i-- {
		h := nodes[i]
		disk := e.disks[img.name][i]
		script := fmt.Sprintf("nc -l %s %s > %s", h.IP, port, disk)
		if i < len(nodes)-1 {
			script = fmt.Sprintf("nc -l %s %s | tee %s | nc -N %s %s", h.IP, port, disk, nodes[i+1].IP, port)
		}
		p, err := e.start(ctx, h, filepath.Join(logDir, h.Name+".log"), "sh", "-c", script)
		if err != nil {
			return res, err
		}
		procs[i] = p
		if err := e.waitListening(ctx, h, port); err != nil {
			return res, err
		}
	}
	start := time.Now()
	src, err := e.start(ctx, e.lab.Server, filepath.Join(logDir, "source.log"), "sh", "-c",
		fmt.Sprintf("nc -N %s %s < %s", nodes[0].IP, port, img.raw))
	if err != nil {
		return res, err
	}
	return e.collect(res, img, start, append(procs, src), len(nodes))
}

// udpcast sends the raw image by multicast with udp-sender to udp-receivers
// on every node, at 95% of the link rate (faster only loses packets at the
// shaper and slows it down).
func (e *labEnv) udpcast(ctx context.Context, r runSpec, img image, logDir string) (result, error) {
	var res result
	nodes := e.lab.Nodes[:r.nodes]
	procs := make([]*proc, len(nodes))
	for i, h := range nodes {
		p, err := e.start(ctx, h, filepath.Join(logDir, h.Name+".log"), "udp-receiver",
			"--file", e.disks[img.name][i], "--interface", "eth0", "--nokbd", "--portbase", "9900")
		if err != nil {
			return res, err
		}
		procs[i] = p
	}
	start := time.Now()
	src, err := e.start(ctx, e.lab.Server, filepath.Join(logDir, "sender.log"), "udp-sender",
		"--file", img.raw, "--interface", "eth0", "--nokbd", "--portbase", "9900",
		"--min-receivers", fmt.Sprint(len(nodes)), "--max-bitrate", fmt.Sprintf("%.0fm", r.mbit*0.95))
	if err != nil {
		return res, err
	}
	return e.collect(res, img, start, append(procs, src), len(nodes))
}

// collect waits for the receivers (the first n procs) and the source, and
// measures each receiver's time from start.
func (e *labEnv) collect(res result, img image, start time.Time, procs []*proc, n int) (result, error) {
	var errs []error
	var mu sync.Mutex
	for i, p := range procs {
		if err := p.wait(); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(p.log), err))
			mu.Unlock()
			continue
		}
		if i < n {
			s := p.end.Sub(start).Seconds()
			res.perNode = append(res.perNode, float64(img.size)/s/1e6)
			res.seconds = max(res.seconds, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.measured = float64(img.size) / res.seconds / 1e6
	return res, nil
}

// waitListening waits until something listens on port in h's namespace,
// without connecting (nc -l would take the probe for its one connection).
func (e *labEnv) waitListening(ctx context.Context, h *lab.Host, port string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := e.lab.Command(ctx, h, "ss", "-Hltn", "sport = :"+port).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("nothing listens on %s:%s", h.Name, port)
}
