package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"dolly/internal/testenv"
	"dolly/internal/testimage"
	"dolly/server"
)

// A failure test casts at a fixed -max-rate so that the cast lasts long
// enough to hurt it mid-way and its time is known.
const (
	failImage = 48 << 20
	failRate  = "16MB/s"
)

// failCast is a cast whose processes the test controls one by one.
type failCast struct {
	t       *testing.T
	addr    string
	args    []string // the server's command line
	img     string
	want    string // the image's sha256
	targets []string
	report  string
	server  *proc
	nodes   []*proc
}

func newFailCast(t *testing.T, nodes int, extra ...string) *failCast {
	t.Helper()
	dir := t.TempDir()
	c := &failCast{t: t, addr: freePort(t), img: filepath.Join(dir, "nt.img"), report: filepath.Join(dir, "report.json")}
	if err := testimage.Write(c.img, failImage, 23, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	c.want, _ = testimage.SHA256(c.img, -1)
	for i := range nodes {
		p := filepath.Join(dir, fmt.Sprintf("disk%02d", i+1))
		if err := testimage.Fill(p, 0xFF, failImage+4096); err != nil {
			t.Fatal(err)
		}
		c.targets = append(c.targets, p)
	}
	c.args = append([]string{"-image", c.img, "-chain", "-nodes", fmt.Sprint(nodes), "-listen", c.addr,
		"-max-rate", failRate, "-progress-interval", "1s", "-report", c.report, "-no-probe", "-net-probe", "0"}, extra...)
	return c
}

func (c *failCast) startServer() *proc {
	c.server = start(c.t, "dolly-server", c.args...)
	return c.server
}

func (c *failCast) startNode(i int, extra ...string) *proc {
	args := append([]string{"-server", c.addr, "-target", c.targets[i], "-name", fmt.Sprintf("pc%02d", i+1),
		"-listen-data", "127.0.0.1:0", "-join-timeout", "30s", "-no-probe"}, extra...)
	return start(c.t, "dolly", args...)
}

func (c *failCast) startNodes() {
	for i := range c.targets {
		c.nodes = append(c.nodes, c.startNode(i))
	}
}

// checkTarget asserts that node i's target holds the image.
func (c *failCast) checkTarget(i int) {
	c.t.Helper()
	if got, err := testimage.SHA256(c.targets[i], failImage); err != nil || got != c.want {
		c.t.Errorf("pc%02d: target sha256 %.12s (%v), image %.12s", i+1, got, err, c.want)
	}
}

func (c *failCast) readReport() server.Report {
	c.t.Helper()
	var r server.Report
	b, err := os.ReadFile(c.report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		c.t.Fatalf("report: %v", err)
	}
	return r
}

// waitWritten waits until p has written at least n bytes.
func waitWritten(t *testing.T, p *proc, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for testenv.Written(p.cmd.Process.Pid) < n {
		select {
		case <-p.done:
			t.Fatalf("%s exited before writing %d bytes:\n%s", p.cmd.Path, n, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not written %d bytes within a minute:\n%s", p.cmd.Path, n, p.out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is nothing to wait on
	}
}

// TestChainSurvivesAKilledNode kills node 3 of a 6-node chain mid-cast:
// the other five finish byte-identical, the server names the dead node and
// exits non-zero, and the cast takes little longer than an unhurt one.
func TestChainSurvivesAKilledNode(t *testing.T) {
	const detection = 2 * time.Second
	timeout := []string{"-node-timeout", detection.String()}

	whole := newFailCast(t, 6, timeout...)
	whole.startServer()
	began := time.Now()
	whole.startNodes()
	if code := whole.server.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("unhurt cast: dolly-server exited %d:\n%s", code, whole.server.out.String())
	}
	baseline := time.Since(began)

	c := newFailCast(t, 6, timeout...)
	c.startServer()
	began = time.Now()
	c.startNodes()
	waitWritten(t, c.nodes[2], failImage/3)
	c.nodes[2].cmd.Process.Signal(syscall.SIGKILL)
	killedAt := time.Since(began)
	code := c.server.wait(t, 2*time.Minute)
	hurt := time.Since(began)
	out := c.server.out.String()
	if code != 1 {
		t.Fatalf("dolly-server exited %d with a node dead; want 1 (the cast ran, not every target verified):\n%s", code, out)
	}
	for i, n := range c.nodes {
		if i == 2 {
			continue
		}
		if code := n.wait(t, time.Minute); code != 0 {
			t.Errorf("pc%02d exited %d:\n%s", i+1, code, n.out.String())
		}
		c.checkTarget(i)
	}
	for _, want := range []string{"pc03 is out of the cast", "pc02 now feeds pc04", "5 of 6 nodes verified", "pc03", "FAILED after"} {
		if !strings.Contains(out, want) {
			t.Errorf("server output lacks %q:\n%s", want, out)
		}
	}
	r := c.readReport()
	for _, n := range r.Nodes {
		if n.Verified != (n.Name != "pc03") {
			t.Errorf("report: %s verified %v (%s)", n.Name, n.Verified, n.Reason)
		}
	}
	limit := baseline + baseline/10 + detection
	t.Logf("unhurt cast %v; pc03 killed at %v, cast took %v (limit %v)", baseline, killedAt, hurt, limit)
	if hurt > limit {
		t.Errorf("the cast took %v with pc03 killed, more than %v (unhurt %v + 10%% + detection %v)", hurt, limit, baseline, detection)
	}
}

// TestServerRestartResumesTheCast kills dolly-server mid-cast and runs the
// same command again: the nodes come back, and the new server sends only
// what they lack. With a key, the new server signs the frames with a key
// of its own, which the nodes take from its welcome.
func TestServerRestartResumesTheCast(t *testing.T) {
	t.Run("unkeyed", func(t *testing.T) { testServerRestart(t) })
	t.Run("keyed", func(t *testing.T) {
		key := makeKey(t)
		testServerRestart(t, "-key", key)
	})
}

func testServerRestart(t *testing.T, keyArgs ...string) {
	c := newFailCast(t, 4, keyArgs...)
	first := c.startServer()
	for i := range c.targets {
		c.nodes = append(c.nodes, c.startNode(i, keyArgs...))
	}
	waitWritten(t, c.nodes[3], failImage/2)
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.wait(t, time.Minute)

	again := c.startServer()
	began := time.Now()
	if code := again.wait(t, 2*time.Minute); code != 0 {
		for i, n := range c.nodes {
			n.wait(t, time.Minute)
			t.Logf("pc%02d's output:\n%s", i+1, n.out.String())
		}
		t.Fatalf("restarted dolly-server exited %d:\n%s", code, again.out.String())
	}
	took := time.Since(began)
	for i, n := range c.nodes {
		if code := n.wait(t, time.Minute); code != 0 {
			t.Errorf("pc%02d exited %d:\n%s", i+1, code, n.out.String())
		}
		c.checkTarget(i)
	}
	out := again.out.String()
	for _, want := range []string{"taking up cast", "of the stream already: sending the rest", "4 of 4 nodes verified"} {
		if !strings.Contains(out, want) {
			t.Errorf("restarted server's output lacks %q:\n%s", want, out)
		}
	}
	r := c.readReport()
	if r.ResumedBytes < r.StreamBytes/3 {
		t.Errorf("restarted server resumed from byte %d of %d: it sent again what the nodes had", r.ResumedBytes, r.StreamBytes)
	}
	rate, _ := strconv.ParseFloat(strings.TrimSuffix(failRate, "MB/s"), 64)
	whole := time.Duration(float64(r.StreamBytes) / (rate * 1e6) * float64(time.Second))
	// The cast, not the nodes' reconnecting (their backoff) before it.
	cast := time.Duration(r.ElapsedSeconds * float64(time.Second))
	t.Logf("restarted server: %v in all, %v casting the rest (%d of %d stream bytes were on the nodes); a whole cast takes %v", took, cast, r.ResumedBytes, r.StreamBytes, whole)
	if cast >= whole {
		t.Errorf("the restarted cast took %v, no less than a whole cast (%v)", cast, whole)
	}
}

// TestStalledNodeIsTakenOut stops a node (SIGSTOP): it neither reports nor
// reads, so it would stall everyone behind it. The server takes it out and
// the rest finish.
func TestStalledNodeIsTakenOut(t *testing.T) {
	c := newFailCast(t, 4, "-node-timeout", "2s")
	c.startServer()
	c.startNodes()
	waitWritten(t, c.nodes[1], failImage/4)
	c.nodes[1].cmd.Process.Signal(syscall.SIGSTOP)
	code := c.server.wait(t, 2*time.Minute)
	c.nodes[1].cmd.Process.Signal(syscall.SIGCONT)
	out := c.server.out.String()
	if code == 0 {
		t.Fatalf("dolly-server exited 0 with a node stalled:\n%s", out)
	}
	for _, i := range []int{0, 2, 3} {
		if code := c.nodes[i].wait(t, time.Minute); code != 0 {
			t.Errorf("pc%02d exited %d:\n%s", i+1, code, c.nodes[i].out.String())
		}
		c.checkTarget(i)
	}
	if code := c.nodes[1].wait(t, time.Minute); code == 0 {
		t.Errorf("the stalled pc02 exited 0:\n%s", c.nodes[1].out.String())
	} else if !strings.Contains(c.nodes[1].out.String(), "taken out of the cast") {
		t.Errorf("pc02 does not say it was taken out:\n%s", c.nodes[1].out.String())
	}
	for _, want := range []string{"pc02 is out of the cast: no word from it", "pc01 now feeds pc03", "3 of 4 nodes verified"} {
		if !strings.Contains(out, want) {
			t.Errorf("server output lacks %q:\n%s", want, out)
		}
	}
}

// TestLateNodeJoinsTheCast starts a node after the cast began: it is
// served apart, in the same cast, and verified with the others.
func TestLateNodeJoinsTheCast(t *testing.T) {
	c := newFailCast(t, 3)
	late := filepath.Join(t.TempDir(), "late")
	if err := testimage.Fill(late, 0xFF, failImage+4096); err != nil {
		t.Fatal(err)
	}
	c.targets = append(c.targets, late)
	c.startServer()
	for i := range 3 {
		c.nodes = append(c.nodes, c.startNode(i))
	}
	waitWritten(t, c.nodes[0], failImage/4)
	latecomer := c.startNode(3)
	if code := latecomer.wait(t, 2*time.Minute); code != 0 {
		t.Errorf("late node exited %d:\n%s", code, latecomer.out.String())
	}
	if code := c.server.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", code, c.server.out.String())
	}
	for i := range 4 {
		c.checkTarget(i)
	}
	for _, want := range []string{"joined late", "4 of 4 nodes verified"} {
		if !strings.Contains(c.server.out.String(), want) {
			t.Errorf("server output lacks %q:\n%s", want, c.server.out.String())
		}
	}
}

// TestDiskErrorFailsOnlyThatNode gives node 2 a target on a file system
// too small for the image: its writes fail part-way. It reports the device
// and offset and fails; the others finish.
func TestDiskErrorFailsOnlyThatNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a small tmpfs to make a failing disk needs root")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, 0) })
	c := newFailCast(t, 3)
	small := filepath.Join(mnt, "disk")
	f, err := os.Create(small)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(failImage + 4096) // sparse: it looks big enough until written
	f.Close()
	c.targets[1] = small
	c.startServer()
	c.startNodes()
	code := c.server.wait(t, 2*time.Minute)
	out := c.server.out.String()
	if code == 0 {
		t.Fatalf("dolly-server exited 0 with a failed disk:\n%s", out)
	}
	for _, i := range []int{0, 2} {
		if code := c.nodes[i].wait(t, time.Minute); code != 0 {
			t.Errorf("pc%02d exited %d:\n%s", i+1, code, c.nodes[i].out.String())
		}
		c.checkTarget(i)
	}
	nodeOut := c.nodes[1].out.String()
	if code := c.nodes[1].wait(t, time.Minute); code == 0 {
		t.Errorf("pc02 exited 0 with a failed disk:\n%s", nodeOut)
	}
	for _, want := range []string{small, "offset", "no space left"} {
		if !strings.Contains(nodeOut, want) || !strings.Contains(out, want) {
			t.Errorf("pc02's error (node or server output) does not name %q:\nnode:\n%s\nserver:\n%s", want, nodeOut, out)
		}
	}
	if !strings.Contains(out, "2 of 3 nodes verified") {
		t.Errorf("server summary:\n%s", out)
	}
}
