package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"dolly/boot"
	"dolly/dolly/castkey"
	"dolly/initramfs"
)

// bootFlags are the flags of the netboot services (-boot).
type bootFlags struct {
	fs         *pflag.FlagSet
	enabled    *bool
	iface      *string
	dhcpRange  *string
	router     *string
	kernel     *string
	initramfs  *string
	kernelArgs *string
	ipxeBIOS   *string
	ipxeEFI    *string
	secureBoot *bool
	shim       *string
	grub       *string
	httpPort   *int
	after      *string
	build      *string
	// ARM64 UEFI PCs, when both the kernel and the initramfs are given
	ipxeARM64, kernelARM64, initramfsARM64 *string
}

// flags that only mean something with -boot
var bootOnly = []string{"interface", "dhcp-range", "router", "kernel", "initramfs", "kernel-args", "ipxe-bios", "ipxe-efi", "secure-boot", "shim", "grub", "http-port",
	"ipxe-arm64", "kernel-arm64", "initramfs-arm64"}

func addBootFlags(fs *pflag.FlagSet) *bootFlags {
	return &bootFlags{
		fs:             fs,
		enabled:        fs.Bool("boot", false, "netboot the nodes: proxyDHCP (or DHCP with -dhcp-range), TFTP and HTTP"),
		iface:          fs.String("interface", "", "network interface to netboot on (default: the only one with IPv4)"),
		dhcpRange:      fs.String("dhcp-range", "", "lease addresses FROM-TO as a full DHCP server, for a switch without one"),
		router:         fs.String("router", "", "default gateway handed out with -dhcp-range (default: none)"),
		kernel:         fs.String("kernel", "", "kernel the nodes boot (default: the newest /boot/vmlinuz-*)"),
		initramfs:      fs.String("initramfs", "", "initramfs the nodes boot (default: initramfs.cpio.gz next to dolly-server)"),
		kernelArgs:     fs.String("kernel-args", "", "extra kernel command line arguments for the nodes"),
		ipxeBIOS:       fs.String("ipxe-bios", boot.DefaultBIOSFile, "iPXE for BIOS clients"),
		ipxeEFI:        fs.String("ipxe-efi", boot.DefaultEFIFile, "iPXE for UEFI clients"),
		secureBoot:     fs.Bool("secure-boot", false, "boot UEFI PCs through signed Shim and GRUB, which Secure Boot accepts, rather than iPXE; the kernel must be signed (Debian's is)"),
		shim:           fs.String("shim", boot.DefaultShimFile, "signed Shim for -secure-boot (Debian's shim-signed)"),
		grub:           fs.String("grub", boot.DefaultGrubFile, "signed GRUB network image for -secure-boot (Debian's grub-efi-amd64-signed)"),
		httpPort:       fs.Int("http-port", boot.DefaultHTTPPort, "HTTP port for the iPXE script, kernel and initramfs"),
		ipxeARM64:      fs.String("ipxe-arm64", boot.DefaultARM64File, "iPXE for ARM64 UEFI clients, used with -kernel-arm64"),
		kernelARM64:    fs.String("kernel-arm64", "", "kernel ARM64 UEFI PCs boot; with -initramfs-arm64 it turns ARM64 netboot on (default: ARM64 PCs get no answer)"),
		initramfsARM64: fs.String("initramfs-arm64", "", "initramfs ARM64 PCs boot: the dolly node built for ARM64 (make initramfs-arm64)"),
		after:          fs.String("after", "none", "what netbooted nodes do after the cast: reboot, poweroff, shell or none (a verified PC that netboots again is sent to its own disk)"),
		build:          fs.String("build-initramfs", "", "write the nodes' initramfs to this file (for -kernel) from dolly-init and gosh next to dolly-server, and exit"),
	}
}

// buildInitramfs writes the initramfs -build-initramfs asks for, from the
// dolly-init and gosh binaries installed next to dolly-server (make
// initramfs puts them in bin/). It reports whether it ran, and the exit
// code.
func (b *bootFlags) buildInitramfs(ctx context.Context, logger *slog.Logger) (ran bool, code int) {
	if *b.build == "" {
		return false, 0
	}
	fail := func(err error) (bool, int) {
		fmt.Fprintf(os.Stderr, "dolly-server: -build-initramfs: %v\n", err)
		return true, 1
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	dir := filepath.Dir(exe)
	opts := initramfs.Options{Output: *b.build, Init: filepath.Join(dir, "dolly-init"), Shell: filepath.Join(dir, "gosh"),
		Kernel: *b.kernel, Logger: logger}
	if _, err := os.Stat(opts.Init); err != nil {
		return fail(fmt.Errorf("%w: run make initramfs (it builds dolly-init and gosh next to dolly-server)", err))
	}
	if opts.Kernel == "" {
		if opts.Kernel, err = boot.DefaultKernel(); err != nil {
			return fail(err)
		}
	}
	if err := initramfs.Build(ctx, opts); err != nil {
		return fail(err)
	}
	fmt.Printf("dolly-server: wrote %s for %s\n", *b.build, opts.Kernel)
	return true, 0
}

// check validates the flags and returns the nodes' after-cast action as
// server.Config.After wants it.
func (b *bootFlags) check() (after string, err error) {
	if !*b.enabled {
		for _, name := range bootOnly {
			if b.fs.Changed(name) {
				return "", fmt.Errorf("-%s needs -boot", name)
			}
		}
	}
	if !*b.secureBoot {
		for _, name := range []string{"shim", "grub"} {
			if b.fs.Changed(name) {
				return "", fmt.Errorf("-%s needs -secure-boot", name)
			}
		}
	} else if b.fs.Changed("ipxe-efi") {
		return "", fmt.Errorf("-ipxe-efi is not used with -secure-boot: UEFI PCs get Shim and GRUB (-shim, -grub)")
	}
	if (*b.kernelARM64 == "") != (*b.initramfsARM64 == "") {
		return "", errors.New("-kernel-arm64 and -initramfs-arm64 go together: ARM64 PCs need both")
	}
	if b.fs.Changed("ipxe-arm64") && *b.kernelARM64 == "" {
		return "", errors.New("-ipxe-arm64 needs -kernel-arm64 and -initramfs-arm64")
	}
	if *b.dhcpRange != "" {
		if _, _, err := boot.ParseRange(*b.dhcpRange); err != nil {
			return "", fmt.Errorf("-dhcp-range: %w", err)
		}
	}
	if *b.router != "" {
		if a, err := netip.ParseAddr(*b.router); err != nil || !a.Is4() {
			return "", fmt.Errorf("-router %q: want an IPv4 address", *b.router)
		}
		if *b.dhcpRange == "" {
			return "", fmt.Errorf("-router needs -dhcp-range: with proxyDHCP the site's DHCP server names the router")
		}
	}
	switch *b.after {
	case "reboot", "poweroff", "shell":
		return *b.after, nil
	case "none", "":
		return "", nil
	}
	return "", fmt.Errorf("-after %q: want reboot, poweroff, shell or none", *b.after)
}

// start starts the netboot services if -boot is set. They run until ctx
// is done; a failure is logged and sent on errc. controlAddr is the
// address nodes are told to join.
//
// With a cast key, the nodes find the server's public key on their
// kernel command line (dolly.serverkey=), never the cast key: they enroll
// (control.NodeEnroll), and get the cast key from the server once -allow
// admits them.
// bootPolicy is who the netboot service answers (answer; nil: every PC)
// and which PCs it sends to their own disks (why says why, sent hears
// that it did).
type bootPolicy struct {
	why    func(mac string) string
	sent   func(mac string)
	answer func(mac string) bool
}

// page, if set, serves every HTTP path that is not a boot file (the status
// page); out is the admin's view.
func (b *bootFlags) start(ctx context.Context, controlAddr string, key castkey.Key, policy bootPolicy, page http.Handler, out io.Writer, logger *slog.Logger, extraArgs ...string) (errc <-chan error, err error) {
	if !*b.enabled {
		return nil, nil
	}
	args := append(strings.Fields(*b.kernelArgs), extraArgs...)
	if key != nil {
		args = append(args, "dolly.serverkey="+castkey.ServerKey(key.Identity().Public().(ed25519.PublicKey)))
	}
	cfg := boot.Config{
		Interface:   *b.iface,
		BIOSFile:    *b.ipxeBIOS,
		EFIFile:     *b.ipxeEFI,
		SecureBoot:  *b.secureBoot,
		ShimFile:    *b.shim,
		GrubFile:    *b.grub,
		Kernel:      *b.kernel,
		Initramfs:   *b.initramfs,
		ControlAddr: controlAddr,
		KernelArgs:  args,
		HTTPPort:    *b.httpPort,
		LocalBoot:   policy.why,
		LocalSent:   policy.sent,
		Answer:      policy.answer,
		Other:       page,
		Logger:      logger,
	}
	if *b.kernelARM64 != "" {
		cfg.ARM64 = &boot.ARM64Boot{IPXE: *b.ipxeARM64, Kernel: *b.kernelARM64, Initramfs: *b.initramfsARM64}
	}
	if *b.dhcpRange != "" {
		if cfg.RangeFrom, cfg.RangeTo, err = boot.ParseRange(*b.dhcpRange); err != nil {
			return nil, fmt.Errorf("-dhcp-range: %w", err)
		}
	}
	if *b.router != "" {
		if cfg.Router, err = netip.ParseAddr(*b.router); err != nil {
			return nil, fmt.Errorf("-router: %w", err)
		}
	}
	if cfg.Kernel == "" {
		if cfg.Kernel, err = boot.DefaultKernel(); err != nil {
			return nil, fmt.Errorf("-boot: %w", err)
		}
	}
	if cfg.Initramfs == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("-boot: finding the default initramfs: %w: pass -initramfs PATH", err)
		}
		cfg.Initramfs = filepath.Join(filepath.Dir(exe), "initramfs.cpio.gz")
	}
	s, err := boot.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("-boot: %w", err)
	}
	fmt.Fprintf(out, "netboot: %s; kernel %s, initramfs %s\n", s.Mode(), cfg.Kernel, cfg.Initramfs)
	if page != nil {
		fmt.Fprintf(out, "status page: %s\n", strings.TrimSuffix(s.ScriptURL(), "boot.ipxe"))
	}
	c := make(chan error, 1)
	go func() {
		err := s.Serve(ctx)
		if err != nil {
			logger.Error("netboot stopped", "err", err)
		}
		c <- err
	}()
	return c, nil
}
