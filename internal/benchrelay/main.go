// Command benchrelay is `make bench-relay`: it measures the CPU time a relay
// node costs per GB it receives, writes to a block device and forwards, for
// dolly (splice/tee and, for reference, its copying fallback), for an
// `nc | tee | nc` relay and for a relay that only splices and tees (no
// checks, writes through the page cache), on the same images over
// loopback, and prints the ratios.
//
// A relay's cost is the machine's busy time over its stream less what the
// hosts around it (the source, the next node) took: it counts the relay's
// processes and the kernel's work for them outside them, such as the
// write-back of what a relay left in the page cache.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"dolly/dolly/probe"
	"dolly/internal/testimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-relay: %v\n", err)
		os.Exit(1)
	}
}

// sample is one measured relay run.
type sample struct {
	// stream is the relay's cost over its stream: the machine's busy time
	// less the other hosts'.
	stream time.Duration
	// process is what the relay's processes took of it; the rest is the
	// kernel's, outside them.
	process time.Duration
	wall    time.Duration
	// startup is the CPU a node spent before the stream (its join and
	// probes): it does not grow with the image.
	startup time.Duration
}

func (s sample) cpu() time.Duration { return s.stream }

func run() error {
	size := flag.Int64("size", 1<<30, "image size in bytes")
	rounds := flag.Int("rounds", 5, "runs per method; the median is reported")
	bin := flag.String("bin", "bin", "directory holding dolly and dolly-server")
	verbose := flag.Bool("v", false, "print every run, not only the medians")
	floor := flag.String("floor-relay", "", "run the splice-only relay alone: LISTEN,NEXT,TARGET (the bench starts it)")
	flag.Parse()
	if *floor != "" {
		args := strings.Split(*floor, ",")
		if len(args) != 3 {
			return fmt.Errorf("-floor-relay %q: want LISTEN,NEXT,TARGET", *floor)
		}
		return floorRelay(args[0], args[1], args[2])
	}
	for _, tool := range []struct{ name, pkg string }{{"nc", "netcat-openbsd"}, {"losetup", "util-linux"}} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Errorf("%s not found: install %s", tool.name, tool.pkg)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(scratchRoot(3**size), "dolly-bench-relay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dev, detach, err := blockTarget(dir, *size)
	if err != nil {
		return fmt.Errorf("the relays write a loop device, as a node writes its disk (this needs root): %w", err)
	}
	defer detach()
	gb := float64(*size) / 1e9
	fmt.Printf("relay CPU per GB received + written to %s + forwarded: %.2f GB images over loopback, median of %d runs after one not counted\n", dev, gb, *rounds)
	fmt.Println("a relay's CPU is the machine's busy time over its stream less the source's and the next host's: its processes, and the kernel's work for them outside them")

	datasets := []struct {
		name string
		mix  testimage.Mix
	}{
		// Dense: every byte travels, so no relay can skip zero runs.
		{"dense data", testimage.Dense},
		// A third zero runs, as in a filesystem with free space: dolly
		// sends those as zero frames, nc | tee | nc sends every byte.
		{"a third zero runs", testimage.Mix{Zero: 1.0 / 3, Random: 1.0 / 3}},
	}
	var failed []string
	for i, ds := range datasets {
		img := filepath.Join(dir, "img")
		if err := testimage.Write(img, *size, uint64(21+i), ds.mix); err != nil {
			return err
		}
		methods := []struct {
			name string
			run  func() (sample, error)
		}{
			{"dolly (splice/tee)", func() (sample, error) { return dollyRelay(*bin, dir, img, dev, *size, false) }},
			{"dolly (copy fallback)", func() (sample, error) { return dollyRelay(*bin, dir, img, dev, *size, true) }},
			{"nc | tee | nc", func() (sample, error) { return pipeRelay(img, dev, *size, ncRelay) }},
			{"splice only (buffered)", func() (sample, error) { return pipeRelay(img, dev, *size, floorCommand(self)) }},
		}
		fmt.Printf("\n%s:\n  %-22s %10s %9s %8s %8s %10s\n", ds.name, "relay", "CPU s/GB", "process s", "kernel s", "wall s", "start-up s")
		results := map[string]sample{}
		for _, m := range methods {
			// A first run warms the page allocator and caches up; it is
			// not counted (it costs any relay up to twice as much).
			if _, err := m.run(); err != nil {
				return fmt.Errorf("%s, %s: %w", ds.name, m.name, err)
			}
			var runs []sample
			for range *rounds {
				s, err := m.run()
				if err != nil {
					return fmt.Errorf("%s, %s: %w", ds.name, m.name, err)
				}
				if *verbose {
					fmt.Printf("    run: stream %.3f s, process %.3f s, wall %.3f s, start-up %.3f s\n",
						s.cpu().Seconds(), s.process.Seconds(), s.wall.Seconds(), s.startup.Seconds())
				}
				runs = append(runs, s)
			}
			slices.SortFunc(runs, func(a, b sample) int { return int(a.cpu() - b.cpu()) })
			med := runs[len(runs)/2]
			results[m.name] = med
			fmt.Printf("  %-22s %10.3f %9.3f %8.3f %8.3f %10.3f\n", m.name, med.cpu().Seconds()/gb, med.process.Seconds(), (med.stream - med.process).Seconds(), med.wall.Seconds(), med.startup.Seconds())
		}
		nc := results["nc | tee | nc"].cpu().Seconds()
		ratio := results["dolly (splice/tee)"].cpu().Seconds() / nc
		verdict := "PASS"
		if ratio > 0.5 {
			verdict = "FAIL"
			failed = append(failed, ds.name)
		}
		fmt.Printf("ratio dolly / nc|tee|nc CPU per GB, %s: %.2f (goal: at most 0.50) %s\n", ds.name, ratio, verdict)
		fmt.Printf("  a relay that only splices and tees, checks nothing and writes through the page cache: %.2f of nc|tee|nc; dolly is %.2fx it\n",
			results["splice only (buffered)"].cpu().Seconds()/nc, results["dolly (splice/tee)"].cpu().Seconds()/results["splice only (buffered)"].cpu().Seconds())
		os.Remove(img)
	}
	if len(failed) > 0 {
		return fmt.Errorf("dolly's relay uses more than half the CPU of nc | tee | nc on %s", strings.Join(failed, " and "))
	}
	return nil
}

// scratchRoot prefers tmpfs, so neither relay waits on a disk.
func scratchRoot(need int64) string {
	var st syscall.Statfs_t
	if syscall.Statfs("/dev/shm", &st) == nil && int64(st.Bavail)*st.Bsize > need {
		return "/dev/shm"
	}
	return os.TempDir()
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// cpuOf is the user and system time c's process and the children it
// waited for took, once it has exited.
func cpuOf(c *exec.Cmd) time.Duration {
	ru := c.ProcessState.SysUsage().(*syscall.Rusage)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// meter measures a relay's stream: the machine's busy time from begin to
// end, less what the other hosts' processes took in between.
type meter struct {
	busy   time.Duration
	others time.Duration // the others' CPU at begin
	relay  time.Duration // the relay's at begin
}

// begin starts the count; others are the running hosts around the relay.
func begin(relay int, others ...int) (meter, error) {
	m := meter{busy: probe.MachineCPU()}
	for _, pid := range others {
		c, err := processCPU(pid)
		if err != nil {
			return m, err
		}
		m.others += c
	}
	var err error
	m.relay, err = processCPU(relay)
	return m, err
}

// end ends the count once every process has exited: others is what the
// other hosts took in all, relay what the relay's took.
func (m meter) end(relay, others time.Duration, wall time.Duration) sample {
	s := sample{
		stream:  probe.MachineCPU() - m.busy - (others - m.others),
		process: relay - m.relay,
		wall:    wall,
		startup: m.relay,
	}
	if s.stream < s.process {
		// The clocks tick in hundredths: a relay costs at least its own.
		s.stream = s.process
	}
	return s
}

// dollyRelay casts img to a chain of two nodes and measures the first, which
// receives, writes dev and forwards every byte, from the moment it starts
// casting.
func dollyRelay(bin, dir, img, dev string, size int64, noSplice bool) (sample, error) {
	addr, err := freeAddr()
	if err != nil {
		return sample{}, err
	}
	if err := poison(dev, size); err != nil {
		return sample{}, err
	}
	t2 := filepath.Join(dir, "t2")
	defer os.Remove(t2)
	// A raw stream, as nc sends: the model could otherwise choose to
	// compress, and this bench is about forwarding, not decoding.
	server := exec.Command(filepath.Join(bin, "dolly-server"), "-image", img, "-chain", "-compress", "no", "-nodes", "2", "-yes", "-listen", addr)
	if err := server.Start(); err != nil {
		return sample{}, err
	}
	defer server.Process.Kill()
	relayArgs := []string{"-server", addr, "-target", dev, "-name", "relay", "-listen-data", "127.0.0.1:0", "-join-timeout", "30s"}
	if noSplice {
		relayArgs = append(relayArgs, "-no-splice")
	}
	relay := exec.Command(filepath.Join(bin, "dolly"), relayArgs...)
	tail := exec.Command(filepath.Join(bin, "dolly"), "-server", addr, "-target", t2, "-name", "tail", "-listen-data", "127.0.0.1:0", "-join-timeout", "30s")
	var (
		m       meter
		merr    error
		started time.Time
	)
	relayLog := &logWatch{key: "msg=casting", fn: func() {
		started = time.Now()
		m, merr = begin(relay.Process.Pid, server.Process.Pid, tail.Process.Pid)
	}}
	relay.Stderr = relayLog
	if err := tail.Start(); err != nil {
		return sample{}, err
	}
	defer tail.Process.Kill()
	if err := relay.Start(); err != nil {
		return sample{}, err
	}
	rerr := relay.Wait()
	terr := tail.Wait()
	serr := server.Wait()
	if err := errors.Join(rerr, terr, serr); err != nil {
		return sample{}, fmt.Errorf("cast failed: %w\n%s", err, relayLog)
	}
	if err := syncDevice(dev); err != nil {
		return sample{}, err
	}
	if !relayLog.fired() {
		return sample{}, fmt.Errorf("the relay node never logged that it started casting:\n%s", relayLog)
	}
	if merr != nil {
		return sample{}, merr
	}
	s := m.end(cpuOf(relay), cpuOf(server)+cpuOf(tail), time.Since(started))
	if err := sameBytes(img, dev, size); err != nil {
		return sample{}, err
	}
	if !strings.Contains(relayLog.String(), "children=1") {
		return sample{}, fmt.Errorf("the node meant to relay forwarded to no one:\n%s", relayLog)
	}
	return s, nil
}

// logWatch keeps a process's log, and calls fn the moment a line holding
// key arrives.
type logWatch struct {
	key  string
	fn   func()
	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
	hit  bool
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	hit := !w.hit && bytes.Contains(w.buf.Bytes(), []byte(w.key))
	w.hit = w.hit || hit
	w.mu.Unlock()
	if hit {
		w.once.Do(w.fn)
	}
	return len(p), nil
}

func (w *logWatch) fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hit
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A relayCommand starts a relay that listens at in, forwards to out and
// writes target.
type relayCommand func(in, out, target string) *exec.Cmd

// ncRelay is `nc -l | tee FILE | nc`, run by a shell: its usage counts the
// three processes.
func ncRelay(in, out, target string) *exec.Cmd {
	inHost, inPort, _ := net.SplitHostPort(in)
	outHost, outPort, _ := net.SplitHostPort(out)
	return exec.Command("sh", "-c", fmt.Sprintf("nc -l %s %s | tee %s | nc -N %s %s", inHost, inPort, target, outHost, outPort))
}

// floorCommand runs this bench's splice-only relay.
func floorCommand(self string) relayCommand {
	return func(in, out, target string) *exec.Cmd {
		return exec.Command(self, "-floor-relay", in+","+out+","+target)
	}
}

// pipeRelay streams img from nc through a relay writing dev to an nc sink,
// and measures the relay.
func pipeRelay(img, dev string, size int64, start relayCommand) (sample, error) {
	in, err := freeAddr()
	if err != nil {
		return sample{}, err
	}
	out, err := freeAddr()
	if err != nil {
		return sample{}, err
	}
	if err := poison(dev, size); err != nil {
		return sample{}, err
	}
	inHost, inPort, _ := net.SplitHostPort(in)
	outHost, outPort, _ := net.SplitHostPort(out)

	sink := exec.Command("nc", "-l", outHost, outPort)
	if err := sink.Start(); err != nil {
		return sample{}, err
	}
	defer sink.Process.Kill()
	if err := waitListening(out); err != nil {
		return sample{}, err
	}
	relay := start(in, out, dev)
	relay.Stderr = os.Stderr
	if err := relay.Start(); err != nil {
		return sample{}, err
	}
	defer relay.Process.Kill()
	if err := waitListening(in); err != nil {
		return sample{}, err
	}
	f, err := os.Open(img)
	if err != nil {
		return sample{}, err
	}
	defer f.Close()
	source := exec.Command("nc", "-N", inHost, inPort)
	source.Stdin = f
	m, err := begin(relay.Process.Pid, sink.Process.Pid)
	if err != nil {
		return sample{}, err
	}
	started := time.Now()
	if err := source.Run(); err != nil {
		return sample{}, fmt.Errorf("source: %w", err)
	}
	if err := relay.Wait(); err != nil {
		return sample{}, fmt.Errorf("relay: %w", err)
	}
	if err := sink.Wait(); err != nil {
		return sample{}, fmt.Errorf("sink: %w", err)
	}
	if err := syncDevice(dev); err != nil {
		return sample{}, err
	}
	s := m.end(cpuOf(relay), cpuOf(source)+cpuOf(sink), time.Since(started))
	return s, sameBytes(img, dev, size)
}

// waitListening waits until something accepts connections at addr, without
// connecting to it (nc -l would take the probe as its one connection).
func waitListening(addr string) error {
	_, port, _ := net.SplitHostPort(addr)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("ss", "-Hltn", "sport = :"+port).Output()
		if len(out) > 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s", addr)
}

func sameBytes(img, target string, size int64) error {
	want, err := testimage.SHA256(img, size)
	if err != nil {
		return err
	}
	got, err := testimage.SHA256(target, size)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s differs from the image", target)
	}
	return nil
}
