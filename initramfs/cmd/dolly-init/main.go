//go:build linux

// Command dolly-init is the /init of dolly's netboot initramfs. It mounts
// the kernel's file systems, loads the drivers of the devices it finds,
// brings the network up with DHCP, runs the dolly node against the server
// named by dolly.server= on the kernel command line, and then reboots,
// powers off or opens a shell as the server (or dolly.after=) says.
//
// Whatever fails, it ends in a rescue shell rather than exiting: the
// kernel panics when PID 1 exits, and a panic screen tells the admin
// nothing.
package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"dolly/dolly/capture"
	"dolly/dolly/castkey"
	"dolly/dolly/node"
	"dolly/initramfs"
	"dolly/internal/units"
)

// dhcpTimeout bounds the wait for a DHCP lease. The machine was just
// netbooted, so a DHCP server was there a moment ago.
const dhcpTimeout = 2 * time.Minute

func main() {
	console := openConsole()
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: level}))
	// u-root's packages log with the standard logger; send it to the
	// console as well.
	slog.SetDefault(log)

	// Signals that end a Go program by default must not end PID 1.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			log.Info("ignoring signal", "signal", s)
		}
	}()

	defer func() {
		if r := recover(); r != nil {
			rescue(log, console, fmt.Errorf("dolly-init crashed: %v", r))
		}
	}()

	boot, err := start(log, level)
	if err != nil {
		rescue(log, console, err)
	}
	if boot.Capture != "" {
		res, err := captureDisk(log, console, boot)
		unix.Sync()
		if err != nil {
			banner(console, "FAILED", err.Error())
			rescue(log, console, err)
		}
		banner(console, "CAPTURED", fmt.Sprintf("%s sent to the server: %s for %s in use, content digest %s",
			boot.Capture, units.FormatBytes(res.Sent), units.FormatBytes(res.Used), res.Digest))
		after := cmp.Or(boot.After, "shell")
		log.Info("after the capture", "action", after)
		finish(log, console, after)
	}
	res, err := cast(log, boot)
	unix.Sync()
	if err != nil {
		banner(console, "FAILED", err.Error())
		rescue(log, console, err)
	}
	banner(console, "VERIFIED", fmt.Sprintf("%s written to %s in %s, content digest %s (the server's)",
		units.FormatBytes(res.Written), res.Target, res.Elapsed.Round(time.Second), res.Digest))
	after, source := res.After, "server"
	if after == "" {
		after, source = boot.After, "dolly.after"
	}
	if after == "" {
		after, source = "shell", "default"
	}
	log.Info("after the cast", "action", after, "from", source)
	finish(log, console, after)
}

// start readies the machine: mounts, modules, network. It returns what
// the kernel command line asks for.
func start(log *slog.Logger, level *slog.LevelVar) (initramfs.Boot, error) {
	mountAll(log)
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Error("reading the kernel command line", "err", err)
	}
	boot, bootErr := initramfs.ParseCmdline(string(cmdline))
	if boot.Debug {
		level.Set(slog.LevelDebug)
	}
	log.Info("dolly-init", "cmdline", strings.TrimSpace(string(cmdline)))
	for _, u := range boot.Unknown {
		log.Warn("unknown boot parameter (ignored)", "param", u)
	}

	// Drivers and network come up even when the command line is wrong, so
	// that the rescue shell can reach the network.
	loadModules(log)
	leases, netErr := bringUpNetwork(context.Background(), log, dhcpTimeout)
	if bootErr != nil {
		return boot, bootErr
	}
	if netErr != nil {
		return boot, netErr
	}
	if boot.Name == "" {
		boot.Name = nodeName(log, leases)
	}
	if err := unix.Sethostname([]byte(boot.Name)); err != nil {
		log.Debug("setting the hostname", "name", boot.Name, "err", err)
	}
	return boot, nil
}

// cast runs the dolly node until the server has verified the target.
func cast(log *slog.Logger, boot initramfs.Boot) (node.Result, error) {
	key, err := bootKey(boot)
	if err != nil {
		return node.Result{}, err
	}
	var serverKey ed25519.PublicKey
	if boot.ServerKey != "" && key == nil {
		k, err := castkey.ParseServerKey(boot.ServerKey)
		if err != nil {
			return node.Result{}, fmt.Errorf("dolly.serverkey: %w", err)
		}
		serverKey = k
	}
	log.Info("joining the cast", "server", boot.Server, "name", boot.Name, "target", boot.Target, "keyed", key != nil, "enrolls", serverKey != nil)
	return node.Run(context.Background(), node.Config{
		Server:      boot.Server,
		Target:      boot.Target,
		Name:        boot.Name,
		Key:         key,
		ServerKey:   serverKey,
		JoinTimeout: 0, // keep trying: the node may boot before the server starts
		Logger:      log,
	})
}

// captureDisk sends the disk dolly.capture names to the server, which
// stores it as an image. It reads the disk, never writes it.
func captureDisk(log *slog.Logger, console *os.File, boot initramfs.Boot) (capture.Result, error) {
	key, err := bootKey(boot)
	if err != nil {
		return capture.Result{}, err
	}
	source, err := node.ResolveTarget(boot.Capture)
	if err != nil {
		return capture.Result{}, fmt.Errorf("dolly.capture=%s: %w", boot.Capture, err)
	}
	log.Info("capturing", "server", boot.Server, "source", source, "keyed", key != nil)
	return capture.Run(context.Background(), capture.Config{Server: boot.Server, Source: source, Name: boot.Name, Key: key,
		Out: console, Logger: log})
}

// bootKey is the cast key dolly.key gives, if any.
func bootKey(boot initramfs.Boot) (castkey.Key, error) {
	if boot.Key == "" {
		return nil, nil
	}
	k, err := castkey.ParseKey(boot.Key)
	if err != nil {
		return nil, fmt.Errorf("dolly.key: %w", err)
	}
	return k, nil
}

// finish performs the after-cast action. It does not return.
func finish(log *slog.Logger, console *os.File, action string) {
	var cmd int
	switch action {
	case "reboot":
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	case "poweroff":
		cmd = unix.LINUX_REBOOT_CMD_POWER_OFF
	case "shell":
		rescue(log, console, nil)
	default:
		rescue(log, console, fmt.Errorf("unknown after-cast action %q", action))
	}
	unix.Sync()
	err := unix.Reboot(cmd)
	rescue(log, console, fmt.Errorf("%s: %w", action, err))
}

// rescue opens the shell on the console, again each time it exits, and
// powers off when there is none. It does not return. err is why, or nil
// when the shell was asked for.
func rescue(log *slog.Logger, console *os.File, err error) {
	unix.Sync()
	if err != nil {
		log.Error("dolly-init cannot go on", "err", err)
	}
	const shell = "/bin/sh"
	if _, statErr := os.Stat(shell); statErr != nil {
		log.Error("no rescue shell in this initramfs: powering off in 10 minutes", "shell", shell)
		time.Sleep(10 * time.Minute)
		unix.Sync()
		unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		for {
			time.Sleep(time.Hour) // never return: the kernel panics when PID 1 exits
		}
	}
	for {
		fmt.Fprintf(console, "\ndolly-init: rescue shell; exit it to power off.\n")
		if err != nil {
			fmt.Fprintf(console, "dolly-init: %v\n", err)
		}
		cmd := exec.Command(shell)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = console, console, console
		cmd.Env = []string{"PATH=/bin:/sbin", "HOME=/root", "TERM=linux"}
		cmd.Dir = "/"
		// Its own session with the console as controlling terminal, so
		// that Ctrl-C reaches the shell's commands and not init.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if runErr := cmd.Run(); runErr != nil {
			log.Warn("rescue shell", "err", runErr)
			time.Sleep(time.Second) // do not spin when the shell cannot start
			continue
		}
		log.Info("rescue shell exited: powering off")
		unix.Sync()
		if poffErr := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); poffErr != nil {
			log.Error("power off", "err", poffErr)
		}
	}
}

// openConsole returns the console for reading and writing. The kernel
// gives init the console as its standard streams when /dev/console exists
// in the initramfs; opening it again also works when it did not.
func openConsole() *os.File {
	f, err := os.OpenFile("/dev/console", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return os.Stderr
	}
	return f
}

// banner prints the outcome so that it stands out on a screen of logs.
func banner(w io.Writer, verdict, detail string) {
	line := strings.Repeat("=", 72)
	fmt.Fprintf(w, "\n%s\ndolly: cast %s: %s\n%s\n\n", line, verdict, detail, line)
}

// mountAll mounts the file systems init and the node need. A failure is
// logged and not fatal: the node may still get by.
func mountAll(log *slog.Logger) {
	mounts := []struct {
		source, target, fstype string
		flags                  uintptr
		data                   string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=000"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			log.Warn("mount point", "dir", m.target, "err", err)
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			log.Warn("mount", "fs", m.fstype, "on", m.target, "err", err)
		}
	}
}

// nodeName picks the name the server shows for this machine when
// dolly.name= is not given: the host name DHCP assigned, the kernel's host
// name, or else the MAC address of the interface that got a lease.
func nodeName(log *slog.Logger, leases []lease) string {
	for _, l := range leases {
		if l.hostname != "" {
			return l.hostname
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" && h != "(none)" && h != "localhost" {
		return h
	}
	for _, l := range leases {
		if len(l.mac) > 0 {
			return l.mac.String()
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		log.Warn("listing interfaces", "err", err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && len(i.HardwareAddr) > 0 {
			return i.HardwareAddr.String()
		}
	}
	return "dolly-node"
}
