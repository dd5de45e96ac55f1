// Command dolly is the node agent: it joins a cast, writes the image to its
// target and forwards it to the next nodes.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"dolly/dolly"
	"dolly/imaging"
	"dolly/internal/cli"
)

const usage = `dolly joins a cast run by dolly-server, writes the image to a target and
forwards it to the next nodes of the plan.

Usage:
  dolly -server HOST:PORT [-target PATH] [-name NAME]

The target is a block device (a partition or a whole disk) or a file. It must
hold the whole image; it is checked before anything is written and left
untouched if it is too small or cannot be opened. Without -target, the node
writes to the target the server names (dolly-server -target).

dolly exits 0 only when its target holds the image and the server has
confirmed the digest.

Examples:
  dolly -server 198.18.0.1:9700 -target /dev/sda2
  dolly -server 127.0.0.1:9700 -target /tmp/pc01.img -name pc01

Options:
`

func main() {
	os.Exit(run())
}

func run() int {
	fs := pflag.NewFlagSet("dolly", pflag.ContinueOnError)
	fs.SortFlags = false
	server := fs.String("server", "", "dolly-server's address, HOST:PORT (port 9700 if omitted)")
	target := fs.String("target", "", "block device or file to write the image to")
	name := fs.String("name", "", "name shown by the server (default: hostname)")
	dataListen := fs.String("listen-data", ":0", "address the upstream node connects to")
	joinTimeout := fs.Duration("join-timeout", 0, "give up if the server cannot be reached within this time (0: keep trying)")
	noSplice := fs.Bool("no-splice", false, "forward with ordinary copies instead of splice/tee (for comparison)")
	verbose := fs.BoolP("verbose", "v", false, "log more")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(cli.LongDash(fs, os.Args[1:])); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "dolly: %v\nRun dolly --help for usage.\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "dolly: unexpected argument %q\nRun dolly --help for usage.\n", fs.Arg(0))
		return 2
	}
	if *server == "" {
		fmt.Fprintf(os.Stderr, "dolly: -server is required\nRun dolly --help for usage.\n")
		return 2
	}
	addr := *server
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr += ":9700"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := dolly.RunNode(ctx, dolly.NodeConfig{
		Server:      addr,
		Target:      *target,
		Name:        *name,
		DataListen:  *dataListen,
		JoinTimeout: *joinTimeout,
		NoSplice:    *noSplice,
		Logger:      cli.Logger(os.Stderr, true, *verbose),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly: %v\n", err)
		return 1
	}
	fmt.Printf("dolly: verified %s on %s in %s (%.1f MB/s)\n", imaging.FormatBytes(res.Written), res.Target,
		time.Since(start).Round(time.Millisecond), float64(res.Written)/res.Elapsed.Seconds()/1e6)
	return 0
}
