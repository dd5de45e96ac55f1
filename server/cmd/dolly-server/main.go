// Command dolly-server casts a disk image to many machines at once.
package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"dolly/capacity"
	"dolly/dolly/castkey"
	"dolly/internal/cli"
	"dolly/internal/units"
	"dolly/server"
	"dolly/server/service"
	"dolly/server/status"
)

const usage = `dolly-server casts a raw or compressed disk image to many machines at once.

Usage:
  dolly-server -image PATH [-auto | -chain | -tree N | -star] [-nodes N] [-target DEV] [options]
  dolly-server -preview -topology FILE [-image PATH] [-o json]
  dolly-server -build-initramfs FILE [-kernel PATH]
  dolly-server -capture -o FILE [-listen HOST:PORT] [-key FILE]
  dolly-server -pack -image PATH -o FILE [-zero-free]
  dolly-server help | --help | --version

Nodes run "dolly -server HOST:PORT" (or netboot into it) and join, each sending
what it measured of itself. Once -nodes have joined, the server shows the
capacity model's prediction for every plan, the plan it runs (who sends to
whom) and each target, asks before overwriting anything (unless -yes or not on
a terminal), streams the image, shows progress per node and ends with a
summary. It exits 0 only if every node verified its target against the image's
digest.

Topologies:
  -auto      let the capacity model pick the fastest plan, and whether to
             compress (the default)
  -chain     multi-drop chain: server → node1 → node2 → …; every link carries the
             image once, so 24 nodes take barely longer than one
  -tree N    n-ary tree: the server and every node send to N children
  -star      the server sends to every node itself

-preview prints the model's prediction for every plan on the network described
by a topology file (see capacity/README.md) and exits without casting.

-boot also netboots the nodes into dolly: proxyDHCP next to the site's DHCP
server (or, with -dhcp-range, a DHCP server of its own for an isolated
switch), TFTP for iPXE and HTTP for the kernel and initramfs, all on
-interface. It needs root, Debian's ipxe package (or -ipxe-bios and
-ipxe-efi) and a kernel (default: the newest /boot/vmlinuz-*; Debian's
linux-image-amd64 is tested). -after tells netbooted nodes what to do once
their target is verified. With -secure-boot, UEFI PCs boot through Shim and
GRUB, both signed (Debian's shim-signed and grub-efi-amd64-signed), so Secure
Boot may stay on; BIOS PCs still get iPXE.

Security: with -key FILE (made by "dolly key -o FILE" and copied to the
nodes) the server and each node prove to each other that they hold the key
before anything is written, every control message and frame carries a tag
under it, the source signs every frame, and -encrypt also encrypts the
frames. Nodes without the key (netbooted ones) get the server's public key
instead, enroll, and are handed the cast key if -allow names them. Without
-key, anyone on the network can join and receive the image.

Watching: a read-only status page (the plan drawn, each node's progress and
verdict, the model's preview, what happened) and Prometheus /metrics are on
-http (default :9701; with -boot, on the netboot HTTP port). -o json writes
the cast's events to stdout as lines of JSON, for scripts.

Images: raw, zstd (.zst) or gzip (.gz), detected by content. Compressed images
travel compressed and are decoded on each node; runs of zeros are not sent.
-pack -image PATH -o FILE stores an image, once, the way a cast takes it best:
its file systems' free blocks as zeros (a used disk's old data neither fills
the file nor travels) and its block map first, as -capture stores a disk, then
zstd in frames of 2 MiB of image, which each node decodes straight into the
buffers its disk is written from.

` + cli.ExitCodes + `
Examples:
  dolly-server -image nt.img -chain -nodes 24 -target /dev/sda2
  dolly-server -image nt.img.zst -tree 2 -nodes 8 -max-rate 50MB/s -yes
  dolly-server -image nt.img -nodes 24 -target /dev/sda2 -boot -interface eth1 -after reboot
  dolly-server -image nt.img -nodes 8 -boot -interface eth1 -dhcp-range 198.18.0.100-198.18.0.199
  dolly-server -image nt.img -nodes 24 -target disk:first -boot -interface eth1 -secure-boot -after reboot
  dolly-server -image nt.img -nodes 24 -target /dev/sda2 -yes -o json > events.jsonl
  dolly-server -preview -topology capacity/examples/patagonia-gbe.json
  dolly-server -capture -o golden.img.zst     (then on the golden PC: dolly capture -server HOST -source /dev/sda)
  dolly-server -pack -image nt.img -o nt.img.zst
  dolly-server -image disk.img -nodes 24 -target /dev/sda -grow-last

Options:
`

func main() {
	os.Exit(run())
}

func run() int {
	fs := pflag.NewFlagSet("dolly-server", pflag.ContinueOnError)
	image := fs.String("image", "", "image file or block device to cast (required to cast)")
	auto := fs.Bool("auto", false, "let the capacity model choose the plan (default)")
	chain := fs.Bool("chain", false, "cast along a multi-drop chain")
	tree := fs.Int("tree", 0, "cast along an n-ary tree with this fan-out")
	star := fs.Bool("star", false, "send to every node from the server")
	nodes := fs.Int("nodes", 0, "start once this many nodes have joined (required unless on a terminal)")
	target := fs.String("target", "", "target on every node that names none: a block device (/dev/sda2) or a disk: query; a node writes a file only when its own -target names it")
	listen := fs.String("listen", server.DefaultListen, "control address nodes connect to")
	compress := fs.String("compress", "auto", "send the image compressed: auto (the model decides), yes or no")
	growLast := fs.Bool("grow-last", false, "for the image of a whole disk (MBR or GPT): grow its last partition to the end of each node's disk, and an ext2/3/4 file system in it (with resize2fs, where the node has it). A GPT's backup table always moves to the disk's end")
	zeroFree := fs.Bool("zero-free", false, "send the free blocks of a raw image's file systems too, as stored, so each target equals the image byte for byte; by default only the blocks in use are sent (NTFS, ext2/3/4, FAT; a whole disk's partitions; a swap area's header), and the nodes discard the free ones where the disk can, else leave them")
	allBlocks := fs.Bool("all-blocks", false, "the same as -zero-free")
	topology := fs.String("topology", "", "topology file describing switches, links and machines (default: one switch)")
	preview := fs.Bool("preview", false, "print the capacity model's prediction for every plan and exit")
	output := fs.StringP("output", "o", "text", "text, or json: a cast writes its events to stdout as lines of JSON (the terminal view goes to stderr); -preview prints its table as JSON. With -capture or -pack: the image file to store")
	captureMode := fs.Bool("capture", false, "store a golden PC's disk as an image instead of casting: -capture -o FILE waits for one dolly capture -server HOST:PORT -source DISK, and writes FILE (zstd, with the disk's block map)")
	packMode := fs.Bool("pack", false, "store -image as -o FILE instead of casting: its block map first, the free blocks as zeros (unless -zero-free), then zstd in frames of 2 MiB of image, which nodes decode whole")
	httpAddr := fs.String("http", defaultHTTP, "address of the status page and /metrics (read-only); off: none. With -boot they are on the netboot HTTP port")
	maxRate := fs.String("max-rate", "", "limit the source's sending rate, e.g. 20MB/s or 100Mbit")
	frameSize := fs.String("frame-size", "1MiB", "frame (segment) size: smaller frames fill a long chain sooner")
	yes := fs.BoolP("yes", "y", false, "do not ask before overwriting the targets")
	joinTimeout := fs.Duration("join-timeout", 0, "give up if the nodes have not joined within this time (0: wait)")
	nodeTimeout := fs.Duration("node-timeout", 5*time.Second, "take a node out of the cast once it has been silent this long; its children get the stream from its upstream")
	stallTimeout := fs.Duration("stall-timeout", 30*time.Second, "take a node out once it has made no progress this long while its upstream was ahead")
	progressEvery := fs.Duration("progress-interval", 5*time.Second, "interval of progress lines when not on a terminal")
	report := fs.String("report", "", "write a JSON record of the cast (plan, prediction, each node's time) to this file")
	keyFile := fs.String("key", "", "cast key file (dolly key -o FILE): only nodes holding it join, every frame is authenticated")
	allow := fs.String("allow", "", "admit nodes that hold no key but the server key (netbooted PCs enroll) by name or MAC: comma-separated patterns such as 'pc*' or '52:54:00:*' (needs -key)")
	encrypt := fs.Bool("encrypt", false, "also encrypt the frames (needs -key); relays forward ciphertext, only nodes decrypt")
	noProbe := fs.Bool("no-probe", false, "do not measure this machine for the capacity model")
	noReplan := fs.Bool("no-replan", false, "keep the model's plan to the end; by default a cast that runs below 80% of its prediction for 5s is re-planned (at most twice) and rewired without a restart")
	netProbe := fs.Duration("net-probe", 400*time.Millisecond, "before the plan, measure the network for this long twice (the server to all nodes at once, then each node to the next); 0 skips it")
	serve := fs.Bool("serve", false, "keep running and cast the images of -images DIR as the admin queues them (dolly-server cast, or the status page)")
	imagesDir := fs.String("images", "", "with -serve: the image library, a directory")
	groupsFile := fs.String("groups", "", "with -serve: the groups of machines (\"lab1: pc01 pc02 52:54:00:*\" per line); only their machines are netbooted and admitted")
	tokenFile := fs.String("admin-token", "", "with -serve: file holding the admin token that queueing and aborting casts need (default: DIR/.dolly-admin-token, made if missing)")
	verbose := fs.BoolP("verbose", "v", false, "log every node event")
	bootf := addBootFlags(fs)
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "help" {
		args = []string{"--help"}
	}
	if len(args) > 0 && args[0] == "cast" {
		return queueCast(args[1:])
	}
	if code := cli.Parse(fs, usage, args); code >= 0 {
		return code
	}
	usageErr := func(format string, a ...any) int { return cli.UsageError("dolly-server", format, a...) }
	var topo *capacity.Topology
	if *topology != "" {
		f, err := os.Open(*topology)
		if err != nil {
			return usageErr("-topology: %v", err)
		}
		topo, err = capacity.ReadTopology(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %s: %v\n", *topology, err)
			return cli.ExitNotStarted
		}
	}
	fsz, err := units.ParseSize(*frameSize)
	if err != nil {
		return usageErr("-frame-size %q: %v", *frameSize, err)
	}
	if *captureMode {
		if *image != "" || *preview || *serve {
			return usageErr("-capture stores an image: leave -image, -preview and -serve out")
		}
		if *output == "text" || *output == "json" || *output == "" {
			return usageErr("-capture needs -o FILE, the image to store (e.g. -o golden.img.zst)")
		}
		after, err := bootf.check()
		if err != nil {
			return usageErr("%v", err)
		}
		return runCapture(captureArgs{listen: *listen, output: *output, keyFile: *keyFile, target: *target, after: after,
			progressEvery: *progressEvery, verbose: *verbose, boot: bootf})
	}
	if *packMode {
		switch {
		case *preview || *serve:
			return usageErr("-pack stores an image: leave -preview and -serve out")
		case *image == "":
			return usageErr("-pack needs -image PATH, the image to store")
		case *output == "text" || *output == "json" || *output == "":
			return usageErr("-pack needs -o FILE, the image to write (e.g. -o nt.img.zst)")
		}
		return runPack(server.PackConfig{Image: *image, Output: *output, AllBlocks: *allBlocks || *zeroFree, ProgressEvery: *progressEvery})
	}
	if *output != "text" && *output != "json" {
		return usageErr("-o %q: want text or json", *output)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if ran, code := bootf.buildInitramfs(ctx, cli.Logger(os.Stderr, false, *verbose)); ran {
		return code
	}
	if *preview {
		if topo == nil {
			return usageErr("-preview needs -topology FILE")
		}
		return runPreview(ctx, topo, *image, int(fsz), *allBlocks, *output)
	}
	switch {
	case *serve && *image != "":
		return usageErr("-serve casts the images of -images DIR as they are queued (dolly-server cast -image NAME): leave -image out")
	case *serve && *imagesDir == "":
		return usageErr("-serve needs -images DIR, the image library")
	case !*serve && (*imagesDir != "" || *groupsFile != "" || *tokenFile != ""):
		return usageErr("-images, -groups and -admin-token are for -serve")
	case !*serve && *image == "":
		return usageErr("-image is required")
	}
	comp, err := server.ParseCompress(*compress)
	if err != nil {
		return usageErr("%v", err)
	}
	cfg := server.Config{
		Image:         *image,
		Nodes:         *nodes,
		Target:        *target,
		Listen:        *listen,
		Yes:           *yes,
		Compress:      comp,
		AllBlocks:     *allBlocks || *zeroFree,
		GrowLast:      *growLast,
		Topology:      topo,
		NoProbe:       *noProbe,
		SetProcs:      runtime.GOMAXPROCS,
		NetProbe:      *netProbe,
		NoReplan:      *noReplan,
		FrameSize:     int(fsz),
		JoinTimeout:   *joinTimeout,
		NodeTimeout:   *nodeTimeout,
		StallTimeout:  *stallTimeout,
		ProgressEvery: *progressEvery,
		Out:           os.Stdout,
		In:            os.Stdin,
		// Node events show in the admin's view; logs are for problems
		// unless asked for.
		Logger: cli.Logger(os.Stderr, *verbose, *verbose),
	}
	// With -o json, stdout carries the events and the admin's view moves
	// to stderr.
	if *output == "json" {
		cfg.Out = os.Stderr
	}
	cfg.Interactive = cli.IsTerminal(os.Stdin) && cli.IsTerminal(cfg.Out.(*os.File))
	shapes := 0
	for _, set := range []bool{*auto, *chain, *tree != 0, *star} {
		if set {
			shapes++
		}
	}
	switch {
	case shapes > 1:
		return usageErr("choose one of -auto, -chain, -tree N and -star")
	case *tree < 0 || fs.Changed("tree") && *tree < 1:
		return usageErr("-tree needs a fan-out of at least 1")
	case *star:
		cfg.Shape = capacity.KindStar
	case *tree > 0:
		cfg.Shape, cfg.Fanout = capacity.KindTree, *tree
	case *chain:
		cfg.Shape = capacity.KindChain
	}
	if *serve {
		// Each queued cast says its plan and its nodes; nobody is at a
		// terminal to confirm.
		if shapes > 0 || *nodes != 0 || *report != "" {
			return usageErr("with -serve, each queued cast names its plan and nodes (dolly-server cast -plan chain -nodes 24), and the status page keeps the reports")
		}
		cfg.Interactive, cfg.Yes = false, true
	}
	if *nodes < 0 {
		return usageErr("-nodes must be positive")
	}
	if *nodes == 0 && !cfg.Interactive && !*serve {
		return usageErr("-nodes is required when not on a terminal (nobody can press Enter to start)")
	}
	if *maxRate != "" {
		r, err := units.ParseRate(*maxRate)
		if err != nil || r <= 0 {
			return usageErr("-max-rate %q: want a rate such as 20MB/s or 100Mbit", *maxRate)
		}
		cfg.MaxRate = r
	}
	switch {
	case *keyFile != "":
		k, err := castkey.ReadKeyFile(*keyFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
			return cli.ExitNotStarted
		}
		if w := castkey.FileWarning(*keyFile); w != "" {
			fmt.Fprintf(os.Stderr, "dolly-server: warning: %s\n", w)
		}
		cfg.Key, cfg.Encrypt = k, *encrypt
		for _, pat := range strings.Split(*allow, ",") {
			if pat = strings.TrimSpace(pat); pat == "" {
				continue
			}
			if _, err := path.Match(pat, ""); err != nil {
				return usageErr("-allow %q: %v", pat, err)
			}
			cfg.Allow = append(cfg.Allow, pat)
		}
		fmt.Fprintf(os.Stderr, "dolly-server: server key %s (nodes without the cast key enroll with dolly -server-key; netbooted ones get it on their command line)\n",
			castkey.ServerKey(k.Identity().Public().(ed25519.PublicKey)))
	case *allow != "":
		return usageErr("-allow needs -key FILE: nodes enroll to get the cast key")
	case *encrypt:
		return usageErr("-encrypt needs -key FILE (make one with: dolly key -o FILE)")
	default:
		fmt.Fprintln(os.Stderr, "dolly-server: warning: no -key: anyone on this network can join the cast and receive the image, and frames are not authenticated")
	}
	if cfg.After, err = bootf.check(); err != nil {
		return usageErr("%v", err)
	}
	if *bootf.enabled && cfg.Key != nil && len(cfg.Allow) == 0 {
		return usageErr("-boot with -key needs -allow: netbooted nodes hold no key, and enroll only if -allow names them (e.g. -allow 'pc*' or a MAC pattern)")
	}
	if *bootf.enabled && fs.Changed("http") {
		return usageErr("-http is for a server without -boot: with -boot the status page is on the netboot HTTP port (-http-port)")
	}
	hub := status.NewHub()
	watchers := []func(server.Event){hub.Publish}
	if *output == "json" {
		// A reader that goes away (| head) ends the events, not the cast:
		// with SIGPIPE handled, a write to it only fails.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		events := newJSONEvents(os.Stdout)
		defer events.Close()
		watchers = append(watchers, events.Send)
	}
	cfg.Events = fanOut(watchers...)
	var svc *service.Service
	var groups service.Groups
	var token string
	if *serve {
		if svc, groups, token, err = newService(*imagesDir, *groupsFile, *tokenFile, cfg); err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
			return cli.ExitNotStarted
		}
	}
	var page http.Handler
	if *httpAddr != "off" && *httpAddr != "" {
		page = hub.Handler()
		if svc != nil {
			page = withAPI(page, svc.Handler(token))
		}
	}
	if page != nil && !*bootf.enabled {
		url, stopPage, err := serveStatus(*httpAddr, fs.Changed("http"), page, cfg.Logger)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
			return cli.ExitNotStarted
		}
		// Deferred calls run last first: the hub is closed before this.
		defer stopPage()
		defer hub.Close()
		if url != "" {
			fmt.Fprintf(cfg.Out, "status page: %s\n", url)
		}
	}
	disks := newDiskBoots()
	policy := bootPolicy{why: disks.why, sent: disks.sentTo}
	if *bootf.enabled && svc == nil {
		cfg.Verified = disks.add
	}
	if svc != nil {
		policy = servicePolicy(svc, groups)
		if *bootf.enabled {
			warnUnbootable(groups, cfg.Out)
		}
	}
	if _, err := bootf.start(ctx, cfg.Listen, cfg.Key, policy, page, cfg.Out, cfg.Logger); err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		return cli.ExitNotStarted
	}
	if svc != nil && *bootf.enabled && page != nil {
		// Netboot serves the page on the lab's interface; dolly-server
		// cast on this machine finds it on loopback too.
		local := fmt.Sprintf("127.0.0.1:%d", *bootf.httpPort)
		if url, stopLocal, err := serveStatus(local, false, page, cfg.Logger); err == nil && url != "" {
			defer stopLocal()
			fmt.Fprintf(cfg.Out, "status page on this machine: %s\n", url)
		}
	}
	if svc != nil {
		fmt.Fprintf(cfg.Out, "dolly-server: serving the images of %s; queue a cast with: dolly-server cast -image NAME%s\n",
			*imagesDir, map[bool]string{true: " -group GROUP", false: " -nodes N"}[groups != nil])
		svc.Run(ctx)
		hub.Close()
		return cli.ExitOK
	}
	sum, err := server.Run(ctx, cfg)
	hub.Close() // open pages get the final state before the page server stops
	disks.castOver()
	if *report != "" && sum.Image != "" {
		if werr := server.WriteReport(*report, sum); werr != nil {
			fmt.Fprintf(os.Stderr, "dolly-server: %v\n", werr)
		}
	}
	if *bootf.enabled && cfg.After == "reboot" {
		disks.await(ctx, rebootWait, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server: %v\n", err)
		if !sum.Started {
			return cli.ExitNotStarted
		}
		return cli.ExitFailed
	}
	return cli.ExitOK
}

// rebootWait bounds how long the netboot service stays up after a cast
// for the verified PCs that reboot to come back and be sent to their
// disks: a PC's firmware and iPXE take a minute or so.
const rebootWait = 3 * time.Minute
