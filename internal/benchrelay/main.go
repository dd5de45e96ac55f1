// Command benchrelay is `make bench-relay`: it measures the CPU time a relay
// node spends per GB it receives, writes and forwards, for dolly (splice/tee
// and, for reference, its copying fallback) and for an `nc | tee | nc`
// relay, on the same image over loopback, and prints the ratio.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
}

func (s sample) cpu() time.Duration { return s.user + s.sys }

func run() error {
	size := flag.Int64("size", 1<<30, "image size in bytes")
	rounds := flag.Int("rounds", 3, "runs per method; the median is reported")
	bin := flag.String("bin", "bin", "directory holding dolly and dolly-server")
	flag.Parse()
	if _, err := exec.LookPath("nc"); err != nil {
		return errors.New("nc not found: install netcat-openbsd")
	}
	dir, err := os.MkdirTemp(scratchRoot(3**size), "dolly-bench-relay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "img")
	// Dense data: every byte travels, so neither relay can skip zero runs.
	if err := testimage.Write(img, *size, 21, testimage.Dense); err != nil {
		return err
	}
	gb := float64(*size) / 1e9
	fmt.Printf("relay CPU per GB received + written + forwarded: %s image of dense data over loopback, median of %d runs\n",
		fmt.Sprintf("%.2f GB", gb), *rounds)

	methods := []struct {
		name string
		run  func() (sample, error)
	}{
		{"dolly (splice/tee)", func() (sample, error) { return dollyRelay(*bin, dir, img, *size, false) }},
		{"dolly (copy fallback)", func() (sample, error) { return dollyRelay(*bin, dir, img, *size, true) }},
		{"nc | tee | nc", func() (sample, error) { return ncRelay(dir, img, *size) }},
	}
	results := map[string]sample{}
	fmt.Printf("  %-22s %10s %8s %8s %8s\n", "relay", "CPU s/GB", "user s", "sys s", "wall s")
	for _, m := range methods {
		var runs []sample
		for range *rounds {
			s, err := m.run()
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			runs = append(runs, s)
		}
		slices.SortFunc(runs, func(a, b sample) int { return int(a.cpu() - b.cpu()) })
		med := runs[len(runs)/2]
		results[m.name] = med
		fmt.Printf("  %-22s %10.3f %8.3f %8.3f %8.3f\n", m.name, med.cpu().Seconds()/gb, med.user.Seconds(), med.sys.Seconds(), med.wall.Seconds())
	}
	ratio := results["dolly (splice/tee)"].cpu().Seconds() / results["nc | tee | nc"].cpu().Seconds()
	verdict := "PASS"
	if ratio > 0.5 {
		verdict = "FAIL"
	}
	fmt.Printf("ratio dolly / nc|tee|nc CPU per GB: %.2f (goal: at most 0.50) %s\n", ratio, verdict)
	if verdict != "PASS" {
		return errors.New("dolly's relay uses more than half the CPU of nc | tee | nc")
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
	server := exec.Command(filepath.Join(bin, "dolly-server"), "-image", img, "-chain", "-nodes", "2", "-yes", "-listen", addr)
	if err := server.Start(); err != nil {
		return sample{}, err
	}
	defer server.Process.Kill()
	relayArgs := []string{"-server", addr, "-target", t1, "-name", "relay", "-listen-data", "127.0.0.1:0", "-join-timeout", "30s"}
	if noSplice {
		relayArgs = append(relayArgs, "-no-splice")
	}
	relay := exec.Command(filepath.Join(bin, "dolly"), relayArgs...)
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
	return usage(relay, wall), nil
}

// ncRelay streams img through `nc -l | tee FILE | nc` and measures that
// pipeline (the shell and its three processes).
func ncRelay(dir, img string, size int64) (sample, error) {
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
	target := filepath.Join(dir, "nc-target")
	defer os.Remove(target)

	sink := exec.Command("nc", "-l", outHost, outPort)
	if err := sink.Start(); err != nil {
		return sample{}, err
	}
	defer sink.Process.Kill()
	relay := exec.Command("sh", "-c", fmt.Sprintf("nc -l %s %s | tee %s | nc -N %s %s", inHost, inPort, target, outHost, outPort))
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
	start := time.Now()
	if err := source.Run(); err != nil {
		return sample{}, fmt.Errorf("source: %w", err)
	}
	if err := relay.Wait(); err != nil {
		return sample{}, fmt.Errorf("relay: %w", err)
	}
	wall := time.Since(start)
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
