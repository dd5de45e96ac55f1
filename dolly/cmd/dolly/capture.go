package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"dolly/dolly/capture"
	"dolly/internal/cli"
	"dolly/internal/units"
)

const captureUsage = `dolly capture sends this PC's disk (or a partition) to dolly-server -capture,
which stores it as an image to cast to the lab: the golden PC's disk, captured
once it is set up.

Usage:
  dolly capture -server HOST:PORT -source DISK [-name NAME] [-key FILE]

The source is read, never written. Its file systems' free blocks (NTFS,
ext2/3/4, FAT; a whole disk's partitions) are left out: they hold old data
nobody needs. The rest travels compressed with zstd. The server stores the
image with the disk's block map, so a cast of it writes only the blocks in
use, and checks the digest of what arrived against what was read.

A mounted source is refused (its file systems could change while they are
read): capture from the netboot initramfs, or unmount first. A file system
not cleanly unmounted is refused too: check it first (e2fsck -f, fsck.fat,
chkdsk), or send every block with -all-blocks.

Exit codes: 0 the server stored the image and checked its digest; 1 the
capture started but failed (the server keeps nothing); 2 a usage error; 3 it
could not start (no server, an unreadable or refused source).

Example:
  dolly capture -server 198.18.0.1:9700 -source /dev/sda

Options:
`

// captureDisk is "dolly capture": send a disk to dolly-server -capture.
func captureDisk(args []string) int {
	fs := pflag.NewFlagSet("dolly capture", pflag.ContinueOnError)
	server := fs.String("server", "", "dolly-server -capture's address, HOST:PORT (port 9700 if omitted)")
	source := fs.String("source", "", "the disk or partition to capture (a block device, or an image file)")
	name := fs.String("name", "", "name shown by the server (default: hostname)")
	keyFile := fs.String("key", "", "cast key file, if the server has one (see dolly key)")
	force := fs.Bool("force", false, "read a source that is mounted or in use")
	allBlocks := fs.Bool("all-blocks", false, "send every block, the free ones too")
	joinTimeout := fs.Duration("join-timeout", 0, "give up if the server cannot be reached within this time (0: keep trying)")
	verbose := fs.BoolP("verbose", "v", false, "log more")
	if code := cli.Parse(fs, captureUsage, args); code >= 0 {
		return code
	}
	usageErr := func(format string, a ...any) int { return cli.UsageError("dolly capture", format, a...) }
	switch {
	case *server == "":
		return usageErr("-server is required")
	case *source == "":
		return usageErr("-source is required: the disk to capture, e.g. /dev/sda")
	}
	addr := serverAddr(*server)
	key, ok := readKey("dolly capture", *keyFile)
	if !ok {
		return cli.ExitNotStarted
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := capture.Run(ctx, capture.Config{Server: addr, Source: *source, Name: *name, Key: key, Force: *force,
		AllBlocks: *allBlocks, JoinTimeout: *joinTimeout, Out: os.Stdout, Logger: cli.Logger(os.Stderr, true, *verbose)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly capture: %v\n", err)
		if !res.Started {
			return cli.ExitNotStarted
		}
		return cli.ExitFailed
	}
	fmt.Printf("dolly capture: %s stored by the server: %s sent for %s in use of %s, digest %s, in %.1fs\n", *source,
		units.FormatBytes(res.Sent), units.FormatBytes(res.Used), units.FormatBytes(res.Size), res.Digest.Short(), res.Seconds)
	return 0
}
