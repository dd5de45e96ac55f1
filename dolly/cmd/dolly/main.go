// Command dolly is the node agent: it joins a cast, writes the image to its
// target and forwards it to the next nodes.
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"dolly/dolly/castkey"
	"dolly/dolly/node"
	"dolly/dolly/probe"
	"dolly/internal/cli"
	"dolly/internal/units"
)

const usage = `dolly joins a cast run by dolly-server, writes the image to a target and
forwards it to the next nodes of the plan.

Usage:
  dolly -server HOST:PORT [-target PATH] [-name NAME] [-key FILE]
  dolly probe [-target PATH] [-server HOST:PORT] [-o json]
  dolly key -o FILE
  dolly capture -server HOST:PORT -source DISK
  dolly help [probe | key | capture]

With -key, the node joins only a server that proves it holds the same cast
key, and writes only frames whose tags verify under it; without -key it joins
only a server that has no key. "dolly key -o FILE" makes a key; copy the file
to the server and the nodes (or put its text on a netbooted node's kernel
command line as dolly.key=...).

The target is a block device (a partition or a whole disk) or a file. It must
hold the whole image; it is checked before anything is written and left
untouched if it is too small or cannot be opened. Without -target, the node
writes to the target the server names (dolly-server -target).

dolly exits 0 only when its target holds the image and the server has
confirmed the digest.
` + cli.ExitCodes + `
When it joins, the node measures itself in one to three seconds (dolly probe
shows the figures): link speed, the target's write rate (written back with the bytes
it held, so nothing changes), memory copy, CRC-32C and decompression rates. The
server's capacity model predicts each plan's rate from them.

Examples:
  dolly -server 198.18.0.1:9700 -target /dev/sda2
  dolly -server 127.0.0.1:9700 -target /tmp/pc01.img -name pc01

Options:
`

func main() {
	os.Exit(run())
}

func run() int {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "probe":
			return probeMachine(os.Args[2:])
		case "key":
			return keygen(os.Args[2:])
		case "capture":
			return captureDisk(os.Args[2:])
		case "help":
			return help(os.Args[2:])
		}
	}
	return runNode(os.Args[1:])
}

// runNode is dolly itself: join a cast and write the image.
func runNode(args []string) int {
	fs := pflag.NewFlagSet("dolly", pflag.ContinueOnError)
	server := fs.String("server", "", "dolly-server's address, HOST:PORT (port 9700 if omitted)")
	target := fs.String("target", "", "block device or file to write the image to")
	name := fs.String("name", "", "name shown by the server (default: hostname)")
	dataListen := fs.String("listen-data", ":0", "address the upstream node connects to")
	joinTimeout := fs.Duration("join-timeout", 0, "give up if the server cannot be reached within this time (0: keep trying)")
	reconnectTimeout := fs.Duration("reconnect-timeout", 10*time.Minute, "during a cast, how long to keep trying to reach a lost server (the node keeps its progress)")
	serverTimeout := fs.Duration("server-timeout", 15*time.Second, "take the server for lost after hearing nothing from it this long")
	force := fs.Bool("force", false, "write even to a target that is mounted or in use (never to the disk this machine runs from)")
	keyFile := fs.String("key", "", "cast key file: authenticate the server and every frame (see dolly key)")
	serverKey := fs.String("server-key", "", "without -key: the server key dolly-server prints; the node enrolls, joins only that server and gets the cast key if the server's -allow admits it")
	noProbe := fs.Bool("no-probe", false, "do not measure this machine when joining (the model then lacks its figures)")
	noSplice := fs.Bool("no-splice", false, "forward with ordinary copies instead of splice/tee (for comparison)")
	buffered := fs.Bool("buffered", false, "write a block device through the page cache instead of with O_DIRECT (for a driver that handles direct writes badly)")
	spoolDir := fs.String("spool", "", "directory for the stream this node holds for a slower node it serves at that node's pace (default: the system's temporary directory, RAM in the netboot image)")
	verbose := fs.BoolP("verbose", "v", false, "log more")
	if code := cli.Parse(fs, usage, args); code >= 0 {
		return code
	}
	if *server == "" {
		return cli.UsageError("dolly", "-server is required")
	}
	addr := serverAddr(*server)
	key, ok := readKey("dolly", *keyFile)
	if !ok {
		return cli.ExitNotStarted
	}
	var pub ed25519.PublicKey
	if *serverKey != "" {
		if key != nil {
			return cli.UsageError("dolly", "-server-key is for a node without -key")
		}
		k, err := castkey.ParseServerKey(*serverKey)
		if err != nil {
			return cli.UsageError("dolly", "-server-key: %v", err)
		}
		pub = k
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	// What the process started with, read before a share lowers it: a
	// later share may raise it again, never past this.
	cores := runtime.GOMAXPROCS(0)
	res, err := node.Run(ctx, node.Config{
		ServerKey:        pub,
		Server:           addr,
		Target:           *target,
		Name:             *name,
		DataListen:       *dataListen,
		JoinTimeout:      *joinTimeout,
		ReconnectTimeout: *reconnectTimeout,
		ServerTimeout:    *serverTimeout,
		NoSplice:         *noSplice,
		SpoolDir:         *spoolDir,
		Buffered:         *buffered,
		NoProbe:          *noProbe,
		Key:              key,
		Force:            *force,
		SetProcs: func(procs int) int {
			runtime.GOMAXPROCS(min(procs, cores))
			return runtime.GOMAXPROCS(0)
		},
		Logger: cli.Logger(os.Stderr, true, *verbose),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly: %v\n", err)
		if !res.Started {
			return cli.ExitNotStarted
		}
		return cli.ExitFailed
	}
	fmt.Printf("dolly: verified %s on %s in %s (%.1f MB/s)\n", units.FormatBytes(res.Written), res.Target,
		time.Since(start).Round(time.Millisecond), float64(res.Written)/res.Elapsed.Seconds()/1e6)
	return 0
}

const probeUsage = `dolly probe measures this machine the way a node does when it joins a cast.

Usage:
  dolly probe [-target PATH] [-server HOST:PORT] [-o json]

It reports the link speed of the interface facing the server (or of the
default route), the target's sequential write rate, and the memory copy,
CRC-32C and decompression rates. The target is measured by writing back the
bytes just read from it, so its content does not change; a mounted block device
is not measured. It takes one to three seconds, the target's write rate most:
it rewrites as much as a second allows (up to half the target and 256 MiB), so
that the rate is what the disk sustains, not its write cache.

Options:
`

func probeMachine(args []string) int {
	fs := pflag.NewFlagSet("dolly probe", pflag.ContinueOnError)
	target := fs.String("target", "", "block device or file to measure the write rate of")
	server := fs.String("server", "", "measure the interface that reaches this address")
	output := fs.StringP("output", "o", "text", "text or json")
	compress := fs.Bool("compress", false, "also measure zstd compression (what the server does on the fly)")
	budget := fs.Duration("budget", 250*time.Millisecond, "time for each measurement (longer is steadier)")
	buffered := fs.Bool("buffered", false, "measure writes through the page cache, as a node run with -buffered makes them")
	if code := cli.Parse(fs, probeUsage, args); code >= 0 {
		return code
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(os.Stderr, "dolly probe: -o %q: want text or json\n", *output)
		return 2
	}
	cfg := probe.Config{Target: *target, Compress: *compress, Budget: *budget, Buffered: *buffered}
	if *server != "" {
		ip, err := probe.LocalIPFor(*server)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly probe: %v\n", err)
			return 1
		}
		cfg.LocalIP = ip
	}
	r := probe.Run(context.Background(), cfg)
	if *output == "json" {
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Println(string(b))
		return 0
	}
	fmt.Print(r.Format())
	return 0
}

const keyUsage = `dolly key makes a cast key: a random secret that dolly-server -key and
dolly -key share, so that only nodes holding it join a cast and only a server
holding it can write their disks.

Usage:
  dolly key -o FILE

The file is created readable by its owner only, and never overwritten.

Options:
`

func keygen(args []string) int {
	fs := pflag.NewFlagSet("dolly key", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "file to write the key to (required)")
	if code := cli.Parse(fs, keyUsage, args); code >= 0 {
		return code
	}
	if *out == "" {
		return cli.UsageError("dolly key", "-o FILE is required")
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly key: %v\n", err)
		return 1
	}
	_, err = fmt.Fprintln(f, string(castkey.NewKey()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		fmt.Fprintf(os.Stderr, "dolly key: %v\n", err)
		return 1
	}
	fmt.Printf("dolly key: wrote a new cast key to %s\n", *out)
	return 0
}

// serverAddr is dolly-server's address as given, on port 9700 unless it
// names one.
func serverAddr(s string) string {
	if _, _, err := net.SplitHostPort(s); err != nil {
		return s + ":9700"
	}
	return s
}

// readKey reads the cast key file at path ("": no key), warning when the
// file is readable by others; ok is false, the error told, if it cannot.
func readKey(prog, path string) (key castkey.Key, ok bool) {
	if path == "" {
		return nil, true
	}
	k, err := castkey.ReadKeyFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		return nil, false
	}
	if w := castkey.FileWarning(path); w != "" {
		fmt.Fprintf(os.Stderr, "%s: warning: %s\n", prog, w)
	}
	return k, true
}

// help is "dolly help [command]": the command's --help.
func help(args []string) int {
	switch {
	case len(args) == 0:
		return runNode([]string{"--help"})
	case len(args) > 1:
	case args[0] == "probe":
		return probeMachine([]string{"--help"})
	case args[0] == "key":
		return keygen([]string{"--help"})
	case args[0] == "capture":
		return captureDisk([]string{"--help"})
	}
	return cli.UsageError("dolly", "help takes no command or one of: probe, key, capture")
}
