// Command mkinitramfs builds dolly's netboot initramfs: dolly-init as
// /init, a rescue shell as /bin/sh, and the kernel modules a lab PC needs
// for its NICs and disks.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"dolly/initramfs"
	"dolly/internal/cli"
	"dolly/internal/units"
)

const usage = `mkinitramfs builds the initramfs dolly-server netboots lab PCs with: a
gzip-compressed cpio archive holding dolly-init as /init, a rescue shell as
/bin/sh and the kernel modules for NICs, disk controllers and the buses they
sit on, with everything those modules depend on.

Usage:
  mkinitramfs -o FILE [-kernel PATH | -modules DIR] [-init PATH] [-shell PATH]

The modules come from /lib/modules/VERSION of the kernel the PCs boot, by
default the newest /boot/vmlinuz-* of this machine. dolly-init and the shell
must be statically linked (CGO_ENABLED=0). The kernel command line then
tells dolly-init what to do: dolly.server=HOST:PORT (required),
dolly.target=PATH or a disk query such as disk:largest, dolly.name=NAME and
dolly.after=reboot|poweroff|shell.

Examples:
  make initramfs
  mkinitramfs -o bin/initramfs.cpio.gz -init bin/dolly-init -shell bin/gosh
  mkinitramfs -o lab.cpio.gz -kernel /boot/vmlinuz-6.1.0-56-amd64
  mkinitramfs -o lab.cpio.gz -modules /srv/kernels/6.12.9/lib/modules/6.12.9

Options:
`

func main() {
	os.Exit(run())
}

func run() int {
	fs := pflag.NewFlagSet("mkinitramfs", pflag.ContinueOnError)
	output := fs.StringP("output", "o", "", "the initramfs file to write (required)")
	kernel := fs.String("kernel", "", "kernel image the initramfs is for (default: the newest /boot/vmlinuz-*)")
	modules := fs.String("modules", "", "kernel modules directory to take modules from (default: /lib/modules/VERSION of -kernel)")
	initBin := fs.String("init", "bin/dolly-init", "the dolly-init binary")
	shell := fs.String("shell", "bin/gosh", "the rescue shell (\"\" for none)")
	noModules := fs.Bool("no-modules", false, "include no kernel modules (for a kernel with its drivers built in)")
	verbose := fs.BoolP("verbose", "v", false, "log more")
	if code := cli.Parse(fs, usage, os.Args[1:]); code >= 0 {
		return code
	}
	if *output == "" {
		return cli.UsageError("mkinitramfs", "-o FILE is required")
	}

	opts := initramfs.Options{
		Output:     *output,
		Init:       *initBin,
		Shell:      *shell,
		Kernel:     *kernel,
		ModulesDir: *modules,
		Logger:     cli.Logger(os.Stderr, true, *verbose),
	}
	switch {
	case *noModules:
		opts.Kernel, opts.ModulesDir = "", ""
	case opts.Kernel == "" && opts.ModulesDir == "":
		k, err := initramfs.NewestKernel("/boot")
		if err != nil {
			// No kernel image to go by: the running kernel's modules.
			var u unix.Utsname
			if uerr := unix.Uname(&u); uerr != nil {
				fmt.Fprintf(os.Stderr, "mkinitramfs: %v\n", err)
				return 1
			}
			opts.ModulesDir = filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:]))
			fmt.Fprintf(os.Stderr, "mkinitramfs: %v; using the running kernel's modules, %s\n", err, opts.ModulesDir)
		}
		opts.Kernel = k
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := initramfs.Build(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "mkinitramfs: %v\n", err)
		return 1
	}
	st, err := os.Stat(*output)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkinitramfs: %v\n", err)
		return 1
	}
	what := "with no kernel modules"
	if opts.ModulesDir != "" {
		what = "with modules from " + opts.ModulesDir
	} else if opts.Kernel != "" {
		what = "for " + opts.Kernel
	}
	fmt.Printf("mkinitramfs: wrote %s (%s) %s\n", *output, units.FormatBytes(st.Size()), what)
	return 0
}
