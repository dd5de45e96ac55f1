// Command dolly-server casts a disk image to many machines at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"dolly/capacity"
	"dolly/internal/cli"
	"dolly/server"
)

const usage = `dolly-server casts a raw or compressed disk image to many machines at once.

Usage:
  dolly-server -image PATH [-chain | -tree N | -star] [-nodes N] [-target DEV] [options]

Nodes run "dolly -server HOST:PORT" (or netboot into it) and join. Once -nodes
have joined, the server shows the plan (who sends to whom) and each target,
asks before overwriting anything (unless -yes or not on a terminal), streams the
image along the plan, shows progress per node and ends with a summary. It exits
0 only if every node verified its target against the image's digest.

Topologies:
  -chain     multi-drop chain: server → node1 → node2 → …; every link carries the
             image once, so 24 nodes take barely longer than one (the default)
  -tree N    n-ary tree: the server and every node send to N children
  -star      the server sends to every node itself

Images: raw, zstd (.zst) or gzip (.gz), detected by content. Compressed images
travel compressed and are decoded on each node; runs of zeros are not sent.

Examples:
  dolly-server -image nt.img -chain -nodes 24 -target /dev/sda2
  dolly-server -image nt.img.zst -tree 2 -nodes 8 -max-rate 50MB/s -yes

Options:
`

func main() {
	os.Exit(run())
}

func run() int {
	fs := pflag.NewFlagSet("dolly-server", pflag.ContinueOnError)
	fs.SortFlags = false
	image := fs.String("image", "", "image file or block device to cast (required)")
	chain := fs.Bool("chain", false, "cast along a multi-drop chain (default)")
	tree := fs.Int("tree", 0, "cast along an n-ary tree with this fan-out")
	star := fs.Bool("star", false, "send to every node from the server")
	nodes := fs.Int("nodes", 0, "start once this many nodes have joined (required unless on a terminal)")
	target := fs.String("target", "", "target on every node that names none, e.g. /dev/sda2")
	listen := fs.String("listen", server.DefaultListen, "control address nodes connect to")
	maxRate := fs.String("max-rate", "", "limit the source's sending rate, e.g. 20MB/s or 100Mbit")
	frameSize := fs.String("frame-size", "1MiB", "frame (segment) size: smaller frames fill a long chain sooner")
	yes := fs.BoolP("yes", "y", false, "do not ask before overwriting the targets")
	joinTimeout := fs.Duration("join-timeout", 0, "give up if the nodes have not joined within this time (0: wait)")
	progressEvery := fs.Duration("progress-interval", 5*time.Second, "interval of progress lines when not on a terminal")
	verbose := fs.BoolP("verbose", "v", false, "log every node event")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(cli.LongDash(fs, os.Args[1:])); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "dolly-server: %v\nRun dolly-server --help for usage.\n", err)
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "dolly-server: "+format+"\nRun dolly-server --help for usage.\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *image == "" {
		return usageErr("-image is required")
	}
	cfg := server.Config{
		Image:         *image,
		Nodes:         *nodes,
		Target:        *target,
		Listen:        *listen,
		Yes:           *yes,
		JoinTimeout:   *joinTimeout,
		ProgressEvery: *progressEvery,
		Out:           os.Stdout,
		In:            os.Stdin,
		Interactive:   cli.IsTerminal(os.Stdin) && cli.IsTerminal(os.Stdout),
		// Node events show in the admin's view; logs are for problems
		// unless asked for.
		Logger: cli.Logger(os.Stderr, *verbose, *verbose),
	}
	shapes := 0
	for _, set := range []bool{*chain, *tree != 0, *star} {
		if set {
			shapes++
		}
	}
	switch {
	case shapes > 1:
		return usageErr("choose one of -chain, -tree N and -star")
	case *tree < 0 || fs.Changed("tree") && *tree < 1:
		return usageErr("-tree needs a fan-out of at least 1")
	case *star:
		cfg.Shape = capacity.KindStar
	case *tree > 0:
		cfg.Shape, cfg.Fanout = capacity.KindTree, *tree
	default:
		cfg.Shape = capacity.KindChain
	}
	if *nodes < 0 {
		return usageErr("-nodes must be positive")
	}
	if *nodes == 0 && !cfg.Interactive {
		return usageErr("-nodes is required when not on a terminal (nobody can press Enter to start)")
	}
	if *maxRate != "" {
		r, err := capacity.ParseRate(*maxRate)
		if err != nil || r <= 0 {
			return usageErr("-max-rate %q: want a rate such as 20MB/s or 100Mbit", *maxRate)
		}
		cfg.MaxRate = r
	}
	fsz, err := capacity.ParseSize(*frameSize)
	if err != nil {
		return usageErr("-frame-size %q: %v", *frameSize, err)
	}
	cfg.FrameSize = int(fsz)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := server.Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		return 1
	}
	return 0
}
