// Package netboot is the netboot test tier: qemu virtual machines whose
// virtio NICs are tap devices on a bridge in a network namespace, where
// dolly-server -boot hands them out addresses, iPXE scripts, the kernel
// and the initramfs. Addresses are in 198.19.77.0/24, inside the
// benchmarking range 198.18.0.0/15 and apart from internal/lab's
// 198.18.0.0/16; the namespace has no other link, so nothing leaves it.
//
// A Net cleans up after itself: Close kills what runs in the namespace
// and deletes it (with its bridge and taps), and NewNet sweeps away what a
// killed earlier run left behind. It needs root.
package netboot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Subnet is the network the machines boot on; the server has its first
// address.
var Subnet = netip.MustParsePrefix("198.19.77.0/24")

// Bridge is the switch's name inside the namespace.
const Bridge = "br0"

// namePrefix names this process's namespace and files so that a later
// run can tell the leftovers of dead runs from a live one.
func namePrefix() string { return fmt.Sprintf("nb%d-", os.Getpid()) }

// Net is a namespace with a bridge, the server's address on it and tap
// devices for the machines.
type Net struct {
	NS     string
	Server netip.Addr // the bridge's address
	Taps   []string
}

// NewNet makes a namespace holding a bridge with the server's address and
// taps tap devices on it. On error it removes whatever it had made.
func NewNet(ctx context.Context, taps int) (n *Net, err error) {
	Sweep()
	n = &Net{NS: namePrefix() + "net", Server: Subnet.Addr().Next()}
	if err := run(ctx, "ip", "netns", "add", n.NS); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
			n = nil
		}
	}()
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", Bridge, "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", n.Server, Subnet.Bits()), "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
	}
	for i := range taps {
		tap := fmt.Sprintf("tap%d", i+1)
		n.Taps = append(n.Taps, tap)
		steps = append(steps,
			[]string{"ip", "tuntap", "add", "dev", tap, "mode", "tap"},
			[]string{"ip", "link", "set", tap, "master", Bridge},
			[]string{"ip", "link", "set", tap, "up"})
	}
	for _, s := range steps {
		if err := run(ctx, "ip", append([]string{"netns", "exec", n.NS}, s...)...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Command prepares name to run inside the namespace. The process gets its
// own process group, so that cancelling ctx kills it and whatever it
// started, and is killed too if this process dies: a qemu left running
// would hold its tap and keep the namespace alive.
func (n *Net) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	// ip netns exec execs the command in place, so the death signal
	// reaches it.
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Close kills every process left in the namespace and deletes it, which
// removes the bridge and the taps.
func (n *Net) Close() error { return removeNS(n.NS) }

func removeNS(ns string) error {
	// A namespace outlives its name while processes run in it.
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return run(context.Background(), "ip", "netns", "delete", ns)
}

// TempDir makes a directory for a run's images, disks and logs, named so
// that Sweep can remove it once this process is gone.
func TempDir() (string, error) { return os.MkdirTemp("", namePrefix()+"*") }

// Sweep removes the namespaces and directories of runs whose process is
// gone.
func Sweep() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			ns, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			if deadRun(ns) {
				removeNS(ns)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "nb*-*"))
	for _, d := range dirs {
		if deadRun(filepath.Base(d)) {
			os.RemoveAll(d)
		}
	}
}

// deadRun reports whether name is "nb", a process id and "-", and that
// process is gone.
func deadRun(name string) bool {
	rest, ok := strings.CutPrefix(name, "nb")
	if !ok {
		return false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	return ok && err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) != nil
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// VM is a qemu machine that boots from its NIC.
type VM struct {
	Name string
	MAC  string
	Tap  string
	Disk string // raw disk image, the machine's only disk
	Log  *Log   // its serial console
	// UEFIVars, when set, makes the machine a UEFI PC: OVMF's firmware
	// (OVMFCode) with this writable copy of its variable store.
	UEFIVars string
	// SecureBoot makes a UEFI PC enforce Secure Boot: OVMF's secure
	// build (OVMFSecureCode), whose variable store (a copy of
	// OVMFSecureVars) holds Microsoft's keys, as a PC's does.
	SecureBoot bool
}

// OVMF's firmware and the variable store a UEFI machine starts from
// (Debian package ovmf), and their Secure Boot builds.
const (
	OVMFCode       = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars       = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	OVMFSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	OVMFSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// Args returns qemu's arguments. The machine is small and slow on
// purpose: TCG, one CPU, 512 MiB (the initramfs unpacks to about 80 MB).
// TCG rather than KVM because iPXE and Linux hang early under KVM on the
// machines this runs on. The NIC is first in the boot order, so QEMU's
// iPXE ROM does the PXE boot. A machine reboots as a PC does (the cast's
// -after reboot); the test stops it once it is where it should be.
//
// A UEFI machine (UEFIVars) boots OVMF on a q35 board; OVMF's own network
// stack does the PXE boot (DHCP architecture 7, EFI x64), so the server
// hands it ipxe.efi, as it would a real UEFI PC.
func (vm *VM) Args() []string {
	var firmware []string
	switch {
	case vm.UEFIVars != "" && vm.SecureBoot:
		// The secure build keeps its variables in SMM, out of the
		// reach of what it boots.
		firmware = []string{"-machine", "q35,smm=on",
			"-global", "driver=cfi.pflash01,property=secure,value=on",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFSecureCode,
			"-drive", "if=pflash,format=raw,unit=1,file=" + vm.UEFIVars,
			"-global", "virtio-net-pci.romfile="}
	case vm.UEFIVars != "":
		firmware = []string{"-machine", "q35",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFCode,
			"-drive", "if=pflash,format=raw,unit=1,file=" + vm.UEFIVars,
			// OVMF would load QEMU's iPXE from the NIC's ROM instead.
			"-global", "virtio-net-pci.romfile="}
	}
	return append(firmware,
		"-name", vm.Name,
		"-accel", "tcg", "-smp", "1", "-m", "512",
		"-nodefaults", "-nographic", "-monitor", "none", "-serial", "stdio",
		"-netdev", "tap,id=n0,ifname="+vm.Tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+vm.MAC+",bootindex=1",
		"-drive", "file="+vm.Disk+",format=raw,if=none,id=d0",
		"-device", "virtio-blk-pci,drive=d0",
		// The kernel's entropy pool fills slowly without a hardware
		// source, and DHCP in the initramfs waits for it.
		"-device", "virtio-rng-pci",
	)
}

// Log is an io.Writer for a process's output: it writes each line to a
// file stamped with the time since start and notes when lines containing
// given texts first appear.
type Log struct {
	path  string
	start time.Time

	mu      sync.Mutex
	f       *os.File
	partial []byte
	marks   []*mark
}

type mark struct {
	text string
	at   time.Duration
	seen chan struct{} // closed once the text has appeared
}

// NewLog creates the file at path and watches for the texts.
func NewLog(path string, start time.Time, texts ...string) (*Log, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	l := &Log{path: path, start: start, f: f}
	for _, t := range texts {
		l.marks = append(l.marks, &mark{text: t, seen: make(chan struct{})})
	}
	return l, nil
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.line(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// line logs one line; l.mu is held.
func (l *Log) line(b []byte) {
	d := time.Since(l.start)
	s := strings.TrimRight(string(b), "\r")
	if l.f != nil {
		fmt.Fprintf(l.f, "[%7.2fs] %s\n", d.Seconds(), s)
	}
	for _, m := range l.marks {
		select {
		case <-m.seen:
		default:
			if strings.Contains(s, m.text) {
				m.at = d
				close(m.seen)
			}
		}
	}
}

// Seen returns a channel that is closed once text has appeared. text must
// be one of those given to NewLog.
func (l *Log) Seen(text string) <-chan struct{} {
	for _, m := range l.marks {
		if m.text == text {
			return m.seen
		}
	}
	panic("netboot: Log does not watch for " + strconv.Quote(text))
}

// At returns when text first appeared, since start.
func (l *Log) At(text string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.marks {
		if m.text != text {
			continue
		}
		select {
		case <-m.seen:
			return m.at, true
		default:
		}
	}
	return 0, false
}

// Close logs an unfinished last line and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	if len(l.partial) > 0 {
		l.line(l.partial)
		l.partial = nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Tail returns the file's last n lines.
func (l *Log) Tail(n int) string {
	f, err := os.Open(l.path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := sc.Err(); err != nil {
		lines = append(lines, err.Error())
	}
	return strings.Join(lines, "\n")
}

// Lines returns the file's lines from the first that contains text on,
// without their time stamps.
func (l *Log) Lines(from string) ([]string, error) {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if _, rest, ok := strings.Cut(line, "] "); ok {
			line = rest
		}
		if out == nil && !strings.Contains(line, from) {
			continue
		}
		out = append(out, line)
	}
	if out == nil {
		return nil, errors.New(l.path + ": no line contains " + strconv.Quote(from))
	}
	return out, nil
}
