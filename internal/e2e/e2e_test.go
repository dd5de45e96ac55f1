// Package e2e runs the real dolly and dolly-server binaries against each
// other over loopback TCP and checks exit codes, output and the bytes on
// every target.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"dolly/imaging"
	"dolly/internal/testimage"
)

var bin string // directory holding the built binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dolly-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir, "dolly/dolly/cmd/dolly", "dolly/server/cmd/dolly-server")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a started binary.
type proc struct {
	cmd            *exec.Cmd
	out            syncBuffer // stdout and stderr as they came
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
	hwm            atomic.Int64 // peak resident set seen in /proc, bytes
}

// syncBuffer is a buffer a process writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	if !filepath.IsAbs(name) {
		name = filepath.Join(bin, name) // one of dolly's programs
	}
	p := &proc{cmd: exec.Command(name, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = io.MultiWriter(&p.out, &p.stdout), io.MultiWriter(&p.out, &p.stderr)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.watchMemory()
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process and returns its exit code.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not finish within %v:\n%s", p.cmd.Path, limit, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// watchMemory samples the process's VmHWM until it exits. getrusage's
// maxrss cannot be used: a child started with vfork inherits the test
// process's resident set as its high-water mark, while VmHWM belongs to the
// program's own address space. VmHWM only grows, so the last sample before
// exit holds the peak up to within one interval.
func (p *proc) watchMemory() {
	path := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				var n int64
				fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), &n)
				if n*1024 > p.hwm.Load() {
					p.hwm.Store(n * 1024)
				}
			}
		}
	}
}

// maxRSS is the process's peak resident set in bytes.
func (p *proc) maxRSS() int64 { return p.hwm.Load() }

func freePort(t *testing.T) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		// The kernel may hand a port it just freed out again: a test
		// that asked twice (a cast's port and its status page's) got the
		// same one, and its server failed to listen.
		if _, taken := portsHandedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

// portsHandedOut are the ports freePort has returned in this process.
var portsHandedOut sync.Map

// scratch is a directory for large files: tmpfs when it has room, so
// gigabyte images do not wait on a disk.
func scratch(t *testing.T, need int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if syscall.Statfs("/dev/shm", &st) == nil && int64(st.Bavail)*st.Bsize > need+need/4 {
		dir, err := os.MkdirTemp("/dev/shm", "dolly-e2e-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

type castRun struct {
	server *proc
	nodes  []*proc
	code   int
	codes  []int
}

// runCast starts dolly-server with args and one dolly per target.
func runCast(t *testing.T, serverArgs []string, targets []string, limit time.Duration) castRun {
	t.Helper()
	addr := freePort(t)
	args := append(serverArgs, "-listen", addr, "-nodes", fmt.Sprint(len(targets)), "-progress-interval", "1s")
	r := castRun{server: start(t, "dolly-server", args...)}
	for i, tg := range targets {
		r.nodes = append(r.nodes, start(t, "dolly", "-server", addr, "-target", tg, "-name", fmt.Sprintf("pc%02d", i+1), "-listen-data", "127.0.0.1:0", "-join-timeout", "30s"))
	}
	for _, n := range r.nodes {
		r.codes = append(r.codes, n.wait(t, limit))
	}
	r.code = r.server.wait(t, limit)
	return r
}

func TestServerCommandAsTyped(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	const size = 16 << 20
	if err := testimage.Write(img, size, 5, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	want, _ := testimage.SHA256(img, -1)
	var targets []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("disk%d", i))
		testimage.Fill(p, 0xFF, size+4096)
		targets = append(targets, p)
	}
	// Exactly as an admin types it, plus what a test needs.
	r := runCast(t, []string{"-image", img, "-chain"}, targets, time.Minute)
	out := r.server.out.String()
	if r.code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", r.code, out)
	}
	for i, n := range r.nodes {
		if r.codes[i] != 0 {
			t.Fatalf("dolly %d exited %d:\n%s", i+1, r.codes[i], n.out.String())
		}
		if !strings.Contains(n.out.String(), "dolly: verified") {
			t.Errorf("dolly %d does not say it verified:\n%s", i+1, n.out.String())
		}
		if got, _ := testimage.SHA256(targets[i], size); got != want {
			t.Errorf("target %d differs from the image", i+1)
		}
	}
	for _, want := range []string{"plan: chain, raw", "3 nodes, depth 3", "dolly-server → pc01 → pc02 → pc03", "3 of 3 nodes verified", "OK (digest verified)"} {
		if !strings.Contains(out, want) {
			t.Errorf("server output lacks %q:\n%s", want, out)
		}
	}
}

func TestTooSmallTargetIsRefusedAndUnchanged(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	testimage.Write(img, 8<<20, 5, testimage.Dense)
	small := filepath.Join(dir, "small")
	testimage.Fill(small, 0x5A, 1<<20)
	before, _ := testimage.SHA256(small, -1)
	r := runCast(t, []string{"-image", img, "-chain"}, []string{small}, time.Minute)
	if r.codes[0] == 0 || r.code == 0 {
		t.Fatalf("exit codes: node %d, server %d; want both non-zero", r.codes[0], r.code)
	}
	msg := r.nodes[0].out.String()
	if !strings.Contains(msg, "target "+small+" is 1.0 MB, image needs 8.4 MB") {
		t.Fatalf("node output does not name both sizes:\n%s", msg)
	}
	if after, _ := testimage.SHA256(small, -1); after != before {
		t.Fatal("the refused target was changed")
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		bin  string
		args []string
		want string
	}{
		{"dolly-server", nil, "-image is required"},
		{"dolly-server", []string{"-image", "x", "-chain", "-star", "-nodes", "1"}, "choose one of"},
		{"dolly-server", []string{"-image", "x", "-nodes", "1", "-max-rate", "fast"}, "-max-rate"},
		{"dolly-server", []string{"-image", "x", "-bogus"}, "unknown"},
		{"dolly", nil, "-server is required"},
		{"dolly", []string{"capture"}, "-server is required"},
		{"dolly", []string{"capture", "-server", "127.0.0.1"}, "-source is required"},
		{"dolly-server", []string{"-capture"}, "-capture needs -o FILE"},
		{"dolly-server", []string{"-capture", "-o", "x.zst", "-image", "y"}, "leave -image"},
	}
	for _, tt := range tests {
		p := start(t, tt.bin, tt.args...)
		if code := p.wait(t, 10*time.Second); code != 2 || !strings.Contains(p.out.String(), tt.want) {
			t.Errorf("%s %q: exit %d, output %q; want 2 and %q", tt.bin, tt.args, code, p.out.String(), tt.want)
		}
	}
	for _, name := range []string{"dolly", "dolly-server"} {
		for _, help := range []string{"--help", "-help", "help"} {
			p := start(t, name, help)
			if code := p.wait(t, 10*time.Second); code != 0 || !strings.Contains(p.out.String(), "Examples:") || !strings.Contains(p.out.String(), "Exit codes:") {
				t.Errorf("%s %s: exit %d:\n%s", name, help, code, p.out.String())
			}
		}
		if name == "dolly" {
			p := start(t, name, "help", "capture")
			if code := p.wait(t, 10*time.Second); code != 0 || !strings.Contains(p.out.String(), "Exit codes:") || !strings.Contains(p.out.String(), "-source") {
				t.Errorf("dolly help capture: exit %d:\n%s", code, p.out.String())
			}
		}
		p := start(t, name, "--version")
		if code := p.wait(t, 10*time.Second); code != 0 || !strings.HasPrefix(p.out.String(), name+" ") {
			t.Errorf("%s --version: exit %d:\n%s", name, code, p.out.String())
		}
	}
	for _, args := range [][]string{{"help", "probe"}, {"probe", "--help"}} {
		p := start(t, "dolly", args...)
		if code := p.wait(t, 10*time.Second); code != 0 || !strings.Contains(p.out.String(), "dolly probe measures this machine") {
			t.Errorf("dolly %q: exit %d:\n%s", args, code, p.out.String())
		}
	}
	p := start(t, "dolly", "help", "nonsense")
	if code := p.wait(t, 10*time.Second); code != 2 || !strings.Contains(p.out.String(), "help takes no command or one of") {
		t.Errorf("dolly help nonsense: exit %d, want 2:\n%s", code, p.out.String())
	}
}

func TestMissingImage(t *testing.T) {
	p := start(t, "dolly-server", "-image", "/nonexistent/nt.img", "-nodes", "1", "-listen", freePort(t))
	// 3: the cast could not start.
	if code := p.wait(t, 10*time.Second); code != 3 || !strings.Contains(p.out.String(), "image /nonexistent/nt.img does not exist") {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
}

// TestNodeMemoryIsBounded casts a 2 GiB image, raw and zstd, along a chain
// of two nodes and checks the relay node's peak RSS stays under 64 MiB.
func TestNodeMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("casts 2 GiB twice; skipped with -short")
	}
	const size = 2 << 30
	const limit = 64 << 20
	dir := scratch(t, 4*size)
	img := filepath.Join(dir, "big.img")
	if err := testimage.Write(img, size, 8, testimage.Mix{Zero: 0.05, Random: 0.45}); err != nil {
		t.Fatal(err)
	}
	want, _ := testimage.SHA256(img, -1)
	zst := img + ".zst"
	if err := testimage.Compress(img, zst, imaging.Zstd); err != nil {
		t.Fatal(err)
	}
	for _, image := range []string{img, zst} {
		t.Run(filepath.Ext(image), func(t *testing.T) {
			targets := []string{filepath.Join(dir, "t1"), filepath.Join(dir, "t2")}
			t.Cleanup(func() {
				for _, tg := range targets {
					os.Remove(tg)
				}
			})
			r := runCast(t, []string{"-image", image, "-chain"}, targets, 5*time.Minute)
			if r.code != 0 {
				t.Fatalf("server exited %d:\n%s", r.code, r.server.out.String())
			}
			for i, n := range r.nodes {
				if r.codes[i] != 0 {
					t.Fatalf("node %d exited %d:\n%s\nserver:\n%s", i+1, r.codes[i], n.out.String(), r.server.out.String())
				}
				if got, _ := testimage.SHA256(targets[i], size); got != want {
					t.Fatalf("target %d differs from the image", i+1)
				}
				rss := n.maxRSS()
				t.Logf("node %d (%s): peak RSS %.1f MiB", i+1, map[int]string{0: "relay", 1: "tail"}[i], float64(rss)/(1<<20))
				if rss >= limit {
					t.Errorf("node %d peak RSS %.1f MiB, limit %d MiB", i+1, float64(rss)/(1<<20), limit>>20)
				}
			}
		})
	}
}

// TestPreviewReproducesTableI runs dolly-server -preview on the shipped
// Patagonia examples and checks the paper's Table I, "Extended model".
func TestPreviewReproducesTableI(t *testing.T) {
	type cell struct {
		topology, compression string
		fanout                int
		mbps, tolerance       float64 // tolerance in MB/s
	}
	tests := []struct {
		file  string
		cells []cell
	}{
		{"patagonia-fe", []cell{
			{"chain", "none", 1, 12.5, 0.1},
			{"tree", "none", 2, 6.3, 0.1},
			{"tree", "none", 3, 4.2, 0.1},
			{"star", "none", 5, 2.5, 0.1},
			{"chain", "gzip", 1, 3.9, 0.1},
			{"star", "gzip", 5, 3.0, 3.0 * 0.15},
		}},
		{"patagonia-gbe", []cell{
			{"chain", "none", 1, 12.6, 0.1},
			{"tree", "none", 2, 9.3, 0.1},
			{"tree", "none", 3, 7.4, 0.1},
			{"star", "none", 5, 5.3, 5.3 * 0.15},
			{"chain", "gzip", 1, 3.9, 0.1},
			{"star", "gzip", 5, 3.0, 3.0 * 0.15},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			p := start(t, "dolly-server", "-preview", "-topology", filepath.Join("..", "..", "capacity", "examples", tt.file+".json"), "-o", "json")
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit %d:\n%s", code, p.out.String())
			}
			var rows []struct {
				Topology      string  `json:"topology"`
				Fanout        int     `json:"fanout"`
				Compression   string  `json:"compression"`
				PredictedMBps float64 `json:"predicted_mbps"`
				Bottleneck    string  `json:"bottleneck"`
			}
			if err := json.Unmarshal([]byte(p.out.String()), &rows); err != nil {
				t.Fatalf("output is not the JSON rows: %v\n%s", err, p.out.String())
			}
			for _, c := range tt.cells {
				found := false
				for _, r := range rows {
					if r.Topology == c.topology && r.Fanout == c.fanout && r.Compression == c.compression {
						found = true
						if math.Abs(r.PredictedMBps-c.mbps) > c.tolerance+1e-9 {
							t.Errorf("%s fanout %d %s: %.2f MB/s, Table I says %.1f (±%.2f)", c.topology, c.fanout, c.compression, r.PredictedMBps, c.mbps, c.tolerance)
						}
						if r.Bottleneck == "" {
							t.Errorf("%s fanout %d %s: no bottleneck", c.topology, c.fanout, c.compression)
						}
					}
				}
				if !found {
					t.Errorf("no row for %s fanout %d %s", c.topology, c.fanout, c.compression)
				}
			}
		})
	}
	t.Run("figure5", func(t *testing.T) {
		p := start(t, "dolly-server", "-preview", "-topology", filepath.Join("..", "..", "capacity", "examples", "figure5.json"))
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, p.out.String())
		}
		var line string
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.HasPrefix(l, "tree ") {
				line = l
			}
		}
		if !strings.Contains(line, " 7.5 ") || !strings.Contains(line, "pc01 and pc02 (in 1, out 2, disk)") {
			t.Fatalf("the explicit tree's row %q, want 7.5 MB/s limited by the two out-degree-2 nodes:\n%s", line, p.out.String())
		}
	})
}
