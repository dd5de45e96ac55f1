package main

// The modes other than a cast: -capture, -pack and -preview.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"dolly/capacity"
	"dolly/dolly/castkey"
	"dolly/internal/cli"
	"dolly/internal/units"
	"dolly/server"
)

// captureArgs are the flags dolly-server -capture takes.
type captureArgs struct {
	listen, output, keyFile string
	target, after           string // with -boot: the disk the netbooted PC sends, and what it does then
	progressEvery           time.Duration
	verbose                 bool
	boot                    *bootFlags
}

// runCapture is dolly-server -capture -o FILE: it stores the disk one
// golden PC sends, run by hand (dolly capture) or netbooted with -boot.
func runCapture(a captureArgs) int {
	cfg := server.CaptureConfig{Listen: a.listen, Output: a.output, ProgressEvery: a.progressEvery, Out: os.Stdout,
		Logger: cli.Logger(os.Stderr, a.verbose, a.verbose)}
	if a.keyFile != "" {
		k, err := castkey.ReadKeyFile(a.keyFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
			return cli.ExitNotStarted
		}
		cfg.Key = k
		if *a.boot.enabled && !strings.Contains(*a.boot.kernelArgs, "dolly.key=") {
			fmt.Fprintln(os.Stderr, "dolly-server: warning: -key with -boot: a netbooted PC holds no key file, so it cannot capture; give it the key's text with -kernel-args dolly.key=TEXT (on a network only the lab reaches), or capture by hand with dolly capture -key")
		}
	} else {
		fmt.Fprintln(os.Stderr, "dolly-server: warning: no -key: anyone on this network can send the image to store")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Netbooted, the golden PC is told on its command line to capture
	// its disk (disk:first unless -target names one), then what to do.
	extra := []string{"dolly.capture=" + cmp.Or(a.target, "disk:first")}
	if a.after != "" {
		extra = append(extra, "dolly.after="+a.after)
	}
	logger := cli.Logger(os.Stderr, false, a.verbose)
	if _, err := a.boot.start(ctx, a.listen, cfg.Key, bootPolicy{}, nil, os.Stdout, logger, extra...); err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		return cli.ExitNotStarted
	}
	sum, err := server.Capture(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		if sum.Node == "" {
			return cli.ExitNotStarted
		}
		return cli.ExitFailed
	}
	fmt.Printf("captured %s of %s: %s raw, %s in use, stored as %s (%s) in %.1fs; digest %s\n", sum.Source, sum.Node,
		units.FormatBytes(sum.Size), units.FormatBytes(sum.Used), a.output, units.FormatBytes(sum.Stored), sum.Seconds, sum.Digest.Short())
	return 0
}

// runPack is dolly-server -pack -image PATH -o FILE.
func runPack(cfg server.PackConfig) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Out = os.Stdout
	fmt.Printf("dolly-server: packing %s to %s\n", cfg.Image, cfg.Output)
	sum, err := server.Pack(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		if !sum.Started {
			return cli.ExitNotStarted
		}
		return cli.ExitFailed
	}
	fmt.Printf("packed %s: %s raw, %s in use, stored as %s (%s) in %.1fs, checked; digest %s\n", cfg.Image,
		units.FormatBytes(sum.Size), units.FormatBytes(sum.Used), cfg.Output, units.FormatBytes(sum.Stored), sum.Seconds, sum.Digest.Short())
	return cli.ExitOK
}

// runPreview prints the model's view of every plan and casts nothing.
func runPreview(ctx context.Context, topo *capacity.Topology, image string, frameSize int, allBlocks bool, output string) int {
	results, notes, err := server.Preview(ctx, topo, image, frameSize, allBlocks)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		return cli.ExitNotStarted
	}
	rows := capacity.Preview(results)
	if output == "json" {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
			return 1
		}
		fmt.Println(string(b))
		return 0
	}
	name := topo.Name
	if name == "" {
		name = "the topology file"
	}
	fmt.Printf("capacity model for %s: predicted rate of each plan (MB/s of image, 10^6 B/s), best first\n", name)
	fmt.Print(capacity.FormatPreview(rows))
	for _, n := range notes {
		fmt.Printf("  note: %s\n", n)
	}
	return 0
}
