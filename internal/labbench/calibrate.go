package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"dolly/capacity"
	"dolly/imaging"
	"dolly/internal/lab"
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
	start := machineCPU()
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
	cpu := (machineCPU() - start).Seconds()
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
	start, cpu0 := time.Now(), machineCPU()
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	n := <-received
	cpu := (machineCPU() - cpu0).Seconds()
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

// machineCPU is the time the machine's CPUs have been busy.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, v := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / 100
}
