// Command benchrelay is `make bench-relay`: it measures the CPU time a relay
// node spends per GB it receives, writes and forwards, for dolly (splice/tee
// and, for reference, its copying fallback), for an `nc | tee | nc` relay
// and for the least any relay costs in the kernel (splice and tee, no
// checks), on the same images over loopback, and prints the ratios.
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
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

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
	user, sys, wall time.Duration
	// startup is the CPU spent before the stream (a node's join and
	// probes), which cpu leaves out: it does not grow with the image.
	startup time.Duration
}

// cpu is the CPU time the stream itself took.
func (s sample) cpu() time.Duration { return s.user + s.sys - s.startup }

func run() error {
	size := flag.Int64("size", 1<<30, "image size in bytes")
	rounds := flag.Int("rounds", 5, "runs per method; the median is reported")
	bin := flag.String("bin", "bin", "directory holding dolly and dolly-server")
	verbose := flag.Bool("v", false, "print every run, not only the medians")
	floor := flag.String("floor-relay", "", "run the kernel floor relay alone: LISTEN,NEXT,TARGET (the bench starts it)")
	flag.Parse()
	if *floor != "" {
		args := strings.Split(*floor, ",")
		if len(args) != 3 {
			return fmt.Errorf("-floor-relay %q: want LISTEN,NEXT,TARGET", *floor)
		}
		return floorRelay(args[0], args[1], args[2])
	}
	if _, err := exec.LookPath("nc"); err != nil {
		return errors.New("nc not found: install netcat-openbsd")
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
	gb := float64(*size) / 1e9
	fmt.Printf("relay CPU per GB received + written + forwarded: %.2f GB images over loopback, median of %d runs after one not counted\n", gb, *rounds)

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
			{"dolly (splice/tee)", func() (sample, error) { return dollyRelay(*bin, dir, img, *size, false) }},
			{"dolly (copy fallback)", func() (sample, error) { return dollyRelay(*bin, dir, img, *size, true) }},
			{"nc | tee | nc", func() (sample, error) { return pipeRelay(dir, img, *size, ncRelay) }},
			{"kernel floor (splice)", func() (sample, error) { return pipeRelay(dir, img, *size, floorCommand(self)) }},
		}
		fmt.Printf("\n%s:\n  %-22s %10s %8s %8s %8s %10s\n", ds.name, "relay", "CPU s/GB", "user s", "sys s", "wall s", "start-up s")
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
					fmt.Printf("    run: stream %.3f s, user %.3f s, sys %.3f s, wall %.3f s, start-up %.3f s\n",
						s.cpu().Seconds(), s.user.Seconds(), s.sys.Seconds(), s.wall.Seconds(), s.startup.Seconds())
				}
				runs = append(runs, s)
			}
			slices.SortFunc(runs, func(a, b sample) int { return int(a.cpu() - b.cpu()) })
			med := runs[len(runs)/2]
			results[m.name] = med
			fmt.Printf("  %-22s %10.3f %8.3f %8.3f %8.3f %10.3f\n", m.name, med.cpu().Seconds()/gb, med.user.Seconds(), med.sys.Seconds(), med.wall.Seconds(), med.startup.Seconds())
		}
		nc := results["nc | tee | nc"].cpu().Seconds()
		ratio := results["dolly (splice/tee)"].cpu().Seconds() / nc
		verdict := "PASS"
		if ratio > 0.5 {
			verdict = "FAIL"
			failed = append(failed, ds.name)
		}
		fmt.Printf("ratio dolly / nc|tee|nc CPU per GB, %s: %.2f (goal: at most 0.50) %s\n", ds.name, ratio, verdict)
		fmt.Printf("  the kernel floor alone is %.2f of nc|tee|nc; dolly is %.2fx the floor\n",
			results["kernel floor (splice)"].cpu().Seconds()/nc, results["dolly (splice/tee)"].cpu().Seconds()/results["kernel floor (splice)"].cpu().Seconds())
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

func usage(c *exec.Cmd, wall time.Duration) sample {
	ru := c.ProcessState.SysUsage().(*syscall.Rusage)
	return sample{
		user: time.Duration(ru.Utime.Nano()),
		sys:  time.Duration(ru.Stime.Nano()),
		wall: wall,
	}
}

// dollyRelay casts img to a chain of two nodes and measures the first, which
// receives, writes and forwards every byte.
func dollyRelay(bin, dir, img string, size int64, noSplice bool) (sample, error) {
	addr, err := freeAddr()
	if err != nil {
		return sample{}, err
	}
	t1, t2 := filepath.Join(dir, "t1"), filepath.Join(dir, "t2")
	defer os.Remove(t1)
	defer os.Remove(t2)
	// A raw stream, as nc sends: the model could otherwise choose to
	// compress, and this bench is about forwarding, not decoding.
	server := exec.Command(filepath.Join(bin, "dolly-server"), "-image", img, "-chain", "-compress", "no", "-nodes", "2", "-yes", "-listen", addr)
	if err := server.Start(); err != nil {
		return sample{}, err
	}
	defer server.Process.Kill()
	relayArgs := []string{"-server", addr, "-target", t1, "-name", "relay", "-listen-data", "127.0.0.1:0", "-join-timeout", "30s"}
	if noSplice {
		relayArgs = append(relayArgs, "-no-splice")
	}
	relay := exec.Command(filepath.Join(bin, "dolly"), relayArgs...)
	var relayLog bytes.Buffer
	relay.Stderr = &relayLog
	tail := exec.Command(filepath.Join(bin, "dolly"), "-server", addr, "-target", t2, "-name", "tail", "-listen-data", "127.0.0.1:0", "-join-timeout", "30s")
	start := time.Now()
	if err := relay.Start(); err != nil {
		return sample{}, err
	}
	if err := tail.Start(); err != nil {
		relay.Process.Kill()
		return sample{}, err
	}
	rerr := relay.Wait()
	wall := time.Since(start)
	terr := tail.Wait()
	serr := server.Wait()
	if err := errors.Join(rerr, terr, serr); err != nil {
		return sample{}, fmt.Errorf("cast failed: %w", err)
	}
	if err := sameBytes(img, t1, size); err != nil {
		return sample{}, err
	}
	if !strings.Contains(relayLog.String(), "children=1") {
		return sample{}, fmt.Errorf("the node meant to relay forwarded to no one:\n%s", relayLog.String())
	}
	s := usage(relay, wall)
	stream, err := streamCPU(relayLog.String())
	if err != nil {
		return sample{}, err
	}
	s.startup = s.user + s.sys - stream
	return s, nil
}

// streamCPU is the CPU time a node reports its stream took, from its log.
func streamCPU(log string) (time.Duration, error) {
	m := regexp.MustCompile(`msg="stream done".* cpu=(\S+)`).FindStringSubmatch(log)
	if m == nil {
		return 0, fmt.Errorf("the relay node did not log its stream's CPU time:\n%s", log)
	}
	return time.ParseDuration(m[1])
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

// floorCommand runs this bench's kernel floor relay.
func floorCommand(self string) relayCommand {
	return func(in, out, target string) *exec.Cmd {
		return exec.Command(self, "-floor-relay", in+","+out+","+target)
	}
}

// pipeRelay streams img from nc through a relay to an nc sink and measures
// the relay.
func pipeRelay(dir, img string, size int64, start relayCommand) (sample, error) {
	in, err := freeAddr()
	if err != nil {
		return sample{}, err
	}
	out, err := freeAddr()
	if err != nil {
		return sample{}, err
	}
	inHost, inPort, _ := net.SplitHostPort(in)
	outHost, outPort, _ := net.SplitHostPort(out)
	target := filepath.Join(dir, "relay-target")
	defer os.Remove(target)

	sink := exec.Command("nc", "-l", outHost, outPort)
	if err := sink.Start(); err != nil {
		return sample{}, err
	}
	defer sink.Process.Kill()
	if err := waitListening(out); err != nil {
		return sample{}, err
	}
	relay := start(in, out, target)
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
	begin := time.Now()
	if err := source.Run(); err != nil {
		return sample{}, fmt.Errorf("source: %w", err)
	}
	if err := relay.Wait(); err != nil {
		return sample{}, fmt.Errorf("relay: %w", err)
	}
	wall := time.Since(begin)
	if err := sink.Wait(); err != nil {
		return sample{}, fmt.Errorf("sink: %w", err)
	}
	if err := sameBytes(img, target, size); err != nil {
		return sample{}, err
	}
	return usage(relay, wall), nil
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
