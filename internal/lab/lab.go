// Package lab builds an emulated lab on one Linux machine: hosts in network
// namespaces, hanging off Linux bridges (the switches) by veth pairs shaped
// with tc to a given rate in both directions, optionally two switches
// joined by a shaped inter-switch link. Hosts get addresses in
// 198.18.0.0/16 (inside the benchmarking range 198.18.0.0/15) and nothing
// in the lab can reach any other address. Targets are loop devices, or
// files where loop devices cannot be had.
//
// A Lab always cleans up after itself: Close removes processes, loop
// devices, links and namespaces, and New sweeps away what a killed earlier
// run left behind. It needs root.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"dolly/internal/testenv"
)

// Spec describes a lab.
type Spec struct {
	// Switches lists the switches; hosts name the one they hang off.
	// Default: one switch, "sw1".
	Switches []string
	// Trunks join switches with shaped links.
	Trunks []Trunk
	// Server is the host dolly-server runs on; Nodes are the rest.
	Server HostSpec
	Nodes  []HostSpec
	// Dir holds the lab's files (loop device backing files, logs).
	Dir string
	// NoDiscard makes disks that cannot discard, as hard disks: a node
	// leaves its image's free blocks as they are instead of discarding
	// them. A discard on a loop device punches a hole in its backing file,
	// and whatever writes there next pays for the blocks again (half the
	// write rate on this machine), which no SSD does.
	NoDiscard bool
}

// HostSpec is one host: its switch and the rate of its link.
type HostSpec struct {
	Name   string
	Switch string  // default: the first switch
	Mbit   float64 // link rate in both directions; 0 leaves the link unshaped
}

// Trunk is a link between two switches.
type Trunk struct {
	A, B string
	Mbit float64
}

// Host is a host of the lab.
type Host struct {
	Name   string
	NS     string // its network namespace
	Switch string
	IP     netip.Addr
	Mbit   float64
	// port is the switch-side end of the host's link.
	port string
}

// Lab is a running lab.
type Lab struct {
	Server *Host
	Nodes  []*Host
	prefix string
	swNS   string
	dir    string
	// noDiscard: loop devices that cannot discard (Spec.NoDiscard).
	noDiscard bool

	mu     sync.Mutex
	undo   []func() error // run in reverse order by Close
	procs  []*exec.Cmd
	closed bool
}

// subnet is where the lab's hosts live: the first /16 of the benchmarking
// range 198.18.0.0/15 (RFC 2544).
var subnet = netip.MustParsePrefix("198.18.0.0/16")

// Available reports why a lab cannot be built here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root")
	}
	for _, prog := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("needs %s (Debian package iproute2)", prog)
		}
	}
	return nil
}

// namePrefix names this process's namespaces so a later run can tell
// leftovers of dead runs from a live lab.
func namePrefix() string { return fmt.Sprintf("dl%d-", os.Getpid()) }

// New builds a lab. On error it removes whatever it had made.
func New(ctx context.Context, spec Spec) (_ *Lab, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	Sweep()
	if len(spec.Switches) == 0 {
		spec.Switches = []string{"sw1"}
	}
	if len(spec.Nodes)+2 > 250 {
		return nil, fmt.Errorf("lab of %d nodes: at most 248", len(spec.Nodes))
	}
	l := &Lab{prefix: namePrefix(), dir: spec.Dir, noDiscard: spec.NoDiscard}
	if l.dir == "" {
		l.dir = os.TempDir()
	}
	defer func() {
		if err != nil {
			l.Close() // the result is nil by now: close what was built
		}
	}()
	l.swNS = l.prefix + "switch"
	if err := l.addNS(ctx, l.swNS); err != nil {
		return nil, err
	}
	for _, sw := range spec.Switches {
		if err := inNS(ctx, l.swNS, "ip", "link", "add", bridgeName(sw), "type", "bridge"); err != nil {
			return nil, err
		}
		if err := inNS(ctx, l.swNS, "ip", "link", "set", bridgeName(sw), "up"); err != nil {
			return nil, err
		}
	}
	for i, tr := range spec.Trunks {
		if err := l.addTrunk(ctx, i, tr, spec.Switches); err != nil {
			return nil, err
		}
	}
	specs := append([]HostSpec{spec.Server}, spec.Nodes...)
	for i, hs := range specs {
		h, err := l.addHost(ctx, i, hs, spec.Switches)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			l.Server = h
		} else {
			l.Nodes = append(l.Nodes, h)
		}
	}
	return l, nil
}

func bridgeName(sw string) string { return "br-" + short(sw, 12) }

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// addNS creates a namespace and arranges for it to go.
func (l *Lab) addNS(ctx context.Context, ns string) error {
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	l.onClose(func() error { return run(context.Background(), "ip", "netns", "delete", ns) })
	return inNS(ctx, ns, "ip", "link", "set", "lo", "up")
}

// addHost makes a namespace for the host and links it to its switch.
func (l *Lab) addHost(ctx context.Context, i int, hs HostSpec, switches []string) (*Host, error) {
	if hs.Switch == "" {
		hs.Switch = switches[0]
	}
	if !slices.Contains(switches, hs.Switch) {
		return nil, fmt.Errorf("host %s: unknown switch %q", hs.Name, hs.Switch)
	}
	ip := subnet.Addr()
	for range i + 1 {
		ip = ip.Next()
	}
	h := &Host{Name: hs.Name, NS: l.prefix + hs.Name, Switch: hs.Switch, IP: ip, Mbit: hs.Mbit, port: fmt.Sprintf("p%d", i)}
	if err := l.addNS(ctx, h.NS); err != nil {
		return nil, err
	}
	// Create the pair in the switch namespace, then move one end.
	if err := inNS(ctx, l.swNS, "ip", "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS); err != nil {
		return nil, err
	}
	steps := [][]string{
		{l.swNS, "ip", "link", "set", h.port, "master", bridgeName(hs.Switch)},
		{l.swNS, "ip", "link", "set", h.port, "up"},
		{h.NS, "ip", "addr", "add", fmt.Sprintf("%s/%d", ip, subnet.Bits()), "brd", "+", "dev", "eth0"},
		{h.NS, "ip", "link", "set", "eth0", "up"},
		// Multicast (udpcast) leaves through the lab's link too.
		{h.NS, "ip", "route", "add", "224.0.0.0/4", "dev", "eth0"},
	}
	for _, s := range steps {
		if err := inNS(ctx, s[0], s[1], s[2:]...); err != nil {
			return nil, err
		}
	}
	if hs.Mbit > 0 {
		if err := shape(ctx, h.NS, "eth0", hs.Mbit); err != nil {
			return nil, err
		}
		if err := shape(ctx, l.swNS, h.port, hs.Mbit); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// addTrunk joins two bridges with a shaped veth pair.
func (l *Lab) addTrunk(ctx context.Context, i int, tr Trunk, switches []string) error {
	if !slices.Contains(switches, tr.A) || !slices.Contains(switches, tr.B) {
		return fmt.Errorf("trunk %s–%s: unknown switch", tr.A, tr.B)
	}
	a, b := fmt.Sprintf("t%da", i), fmt.Sprintf("t%db", i)
	steps := [][]string{
		{"ip", "link", "add", a, "type", "veth", "peer", "name", b},
		{"ip", "link", "set", a, "master", bridgeName(tr.A)},
		{"ip", "link", "set", b, "master", bridgeName(tr.B)},
		{"ip", "link", "set", a, "up"},
		{"ip", "link", "set", b, "up"},
	}
	for _, s := range steps {
		if err := inNS(ctx, l.swNS, s[0], s[1:]...); err != nil {
			return err
		}
	}
	if tr.Mbit > 0 {
		if err := shape(ctx, l.swNS, a, tr.Mbit); err != nil {
			return err
		}
		return shape(ctx, l.swNS, b, tr.Mbit)
	}
	return nil
}

// shape limits what leaves dev to mbit with HTB. A host's NIC on Linux
// queues with fq_codel, which keeps the ACKs of one stream from waiting
// behind another stream's bulk data; this kernel may lack fq_codel, so
// small packets (ACKs, control messages: IP length under 128) get a class
// of their own that goes first, and bulk data a deep FIFO behind it. The
// burst allows about a millisecond at the rate.
func shape(ctx context.Context, ns, dev string, mbit float64) error {
	kbit := func(f float64) string { return fmt.Sprintf("%dkbit", int64(mbit*1000*f)) }
	burst := strconv.FormatInt(max(int64(mbit*1e6/8/1000), 16<<10), 10)
	steps := [][]string{
		{"tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20"},
		{"tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", kbit(1), "ceil", kbit(1),
			"burst", burst, "cburst", burst, "quantum", "1514"},
		{"tc", "class", "add", "dev", dev, "parent", "1:1", "classid", "1:10", "htb", "rate", kbit(0.05), "ceil", kbit(1),
			"burst", burst, "cburst", burst, "quantum", "1514", "prio", "0"},
		{"tc", "class", "add", "dev", dev, "parent", "1:1", "classid", "1:20", "htb", "rate", kbit(0.95), "ceil", kbit(1),
			"burst", burst, "cburst", burst, "quantum", "1514", "prio", "1"},
		{"tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
			"match", "u16", "0x0000", "0xff80", "at", "2", "flowid", "1:10"},
	}
	for _, s := range steps {
		if err := inNS(ctx, ns, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func inNS(ctx context.Context, ns, name string, args ...string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command prepares name to run on host h. Processes started through
// Start are killed by Close.
func (l *Lab) Command(ctx context.Context, h *Host, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	// Its own process group, so Close can stop a shell and its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Start starts cmd and has Close kill it if it still runs.
func (l *Lab) Start(cmd *exec.Cmd) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab is closed")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.procs = append(l.procs, cmd)
	return nil
}

// Disk makes a target of size bytes for a node: a loop device over a file
// in the lab's directory, or the file itself where loop devices are not
// available. fill, if not zero, is written over the whole disk first, so
// it holds old data as a used disk does.
func (l *Lab) Disk(ctx context.Context, name string, size int64, fill byte) (string, error) {
	f, err := os.CreateTemp(l.dir, fmt.Sprintf("lab%d-%s-*.disk", os.Getpid(), name))
	if err != nil {
		return "", err
	}
	path := f.Name()
	l.onClose(func() error { return os.Remove(path) })
	if fill != 0 {
		buf := make([]byte, 1<<20)
		for i := range buf {
			buf[i] = fill
		}
		for left := size; left > 0; left -= int64(len(buf)) {
			if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
				f.Close()
				return "", err
			}
		}
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	// Direct I/O: the loop device writes through to the machine's disk as
	// the node writes, as a PC's own disk would, instead of piling every
	// node's data up as the machine's dirty pages and flushing them all
	// at the end of the cast, one node after another.
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--direct-io=on", path).CombinedOutput()
	if err != nil {
		out, err = exec.CommandContext(ctx, "losetup", "--find", "--show", path).CombinedOutput()
	}
	if err != nil {
		return path, nil // a file target where loop devices cannot be had
	}
	dev := strings.TrimSpace(string(out))
	l.onClose(func() error {
		err := run(context.Background(), "losetup", "--detach", dev)
		if l.noDiscard && err == nil {
			// The kernel keeps a discard limit for the loop device's
			// whole life: the next user gets a new one.
			removeLoop(dev)
		}
		return err
	})
	if l.noDiscard {
		knob := "/sys/block/" + filepath.Base(dev) + "/queue/discard_max_bytes"
		if err := os.WriteFile(knob, []byte("0"), 0); err != nil {
			return "", fmt.Errorf("turning discard off on %s: %w", dev, err)
		}
	}
	return dev, nil
}

// SetLink brings a host's link down or up, as pulling or plugging its cable.
func (l *Lab) SetLink(ctx context.Context, h *Host, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return inNS(ctx, l.swNS, "ip", "link", "set", h.port, state)
}

// SetRate shapes a host's link to mbit in both directions from now on, as
// a link that slows down mid-cast (a duplex mismatch, other traffic).
func (l *Lab) SetRate(ctx context.Context, h *Host, mbit float64) error {
	for _, end := range []struct{ ns, dev string }{{h.NS, "eth0"}, {l.swNS, h.port}} {
		if h.Mbit > 0 {
			if err := inNS(ctx, end.ns, "tc", "qdisc", "del", "dev", end.dev, "root"); err != nil {
				return err
			}
		}
		if err := shape(ctx, end.ns, end.dev, mbit); err != nil {
			return err
		}
	}
	h.Mbit = mbit
	return nil
}

func (l *Lab) onClose(f func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.undo = append(l.undo, f)
}

// Close kills the lab's processes and removes its loop devices, links and
// namespaces. It is safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs, undo := l.procs, l.undo
	l.mu.Unlock()
	for _, p := range procs {
		if p.Process != nil && p.ProcessState == nil {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		}
	}
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sweep removes namespaces left by lab runs whose process is gone, and the
// loop devices over their files.
func Sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		ns, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if deadRun(ns, "dl") {
			run(context.Background(), "ip", "netns", "delete", ns)
		}
	}
	if out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && deadRun(filepath.Base(f[1]), "lab") {
				run(context.Background(), "losetup", "--detach", f[0])
			}
		}
	}
}

// deadRun reports whether name is prefix, a process id and "-", and that
// process is gone.
func deadRun(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	return ok && err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) != nil
}

// TCPEfficiency is the payload share of a shaped link: tc counts a
// full-size TCP segment as 1514 bytes (Ethernet, IP and TCP headers with
// timestamps) for 1448 bytes of payload.
const TCPEfficiency = 1448.0 / 1514.0

// Machine is the name the lab's hosts share in its topology file: they all
// run on this one machine and share its CPU and memory.
const Machine = "lab"

// InNamespace runs f on an OS thread switched into h's network namespace;
// sockets f opens live there and may be used from anywhere afterwards.
// The thread is never handed back to the scheduler: it ends with f.
func InNamespace(h *Host, f func() error) error {
	if err := testenv.InNetNS(h.NS, f); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}

// removeLoop removes a detached loop device, so that the next one made is
// new (see Spec.NoDiscard). A device in use again is left.
func removeLoop(dev string) {
	var nr int
	if _, err := fmt.Sscanf(dev, "/dev/loop%d", &nr); err != nil {
		return
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer ctl.Close()
	unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_REMOVE, nr)
}
