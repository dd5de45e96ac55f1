package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"dolly/internal/testenv"
	"dolly/internal/testimage"
	"dolly/server"
)

// labCast is one cast on a lab: the server and a node per lab host, each
// logging to a file.
type labCast struct {
	t      *testing.T
	l      *Lab
	dir    string
	bin    string
	disks  []string
	server *exec.Cmd
	nodes  []*exec.Cmd
	report string
}

func startLabCast(ctx context.Context, t *testing.T, l *Lab, bin, dir, img string, size int64, serverArgs, nodeArgs []string) *labCast {
	t.Helper()
	c := &labCast{t: t, l: l, dir: dir, bin: bin, report: filepath.Join(dir, "report.json")}
	addr := l.Server.IP.String() + ":9700"
	// A chain unless the test names a plan.
	shape := []string{"-chain"}
	if slices.ContainsFunc(serverArgs, func(a string) bool { return slices.Contains([]string{"-auto", "-star", "-tree"}, a) }) {
		shape = nil
	}
	args := append(append([]string{"-image", img, "-nodes", fmt.Sprint(len(l.Nodes)), "-yes", "-listen", addr,
		"-report", c.report, "-progress-interval", "2s"}, shape...), serverArgs...)
	c.server = c.start(ctx, l.Server, "server", filepath.Join(bin, "dolly-server"), args...)
	for _, h := range l.Nodes {
		disk, err := l.Disk(ctx, h.Name, size+(1<<20), 0xFF)
		if err != nil {
			t.Fatal(err)
		}
		c.disks = append(c.disks, disk)
		args := append([]string{"-server", addr, "-target", disk, "-name", h.Name, "-join-timeout", "60s"}, nodeArgs...)
		c.nodes = append(c.nodes, c.start(ctx, h, h.Name, filepath.Join(bin, "dolly"), args...))
	}
	return c
}

func (c *labCast) start(ctx context.Context, h *Host, log, name string, args ...string) *exec.Cmd {
	cmd := c.l.Command(ctx, h, name, args...)
	f, err := os.Create(filepath.Join(c.dir, log+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { f.Close() })
	cmd.Stdout, cmd.Stderr = f, f
	if err := c.l.Start(cmd); err != nil {
		c.t.Fatal(err)
	}
	return cmd
}

func (c *labCast) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	return string(b)
}

func (c *labCast) readReport() server.Report {
	c.t.Helper()
	var r server.Report
	b, err := os.ReadFile(c.report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		c.t.Fatalf("report: %v\nserver:\n%s", err, c.log("server"))
	}
	return r
}

// TestChainSurvivesALinkCut pulls the cable of node 5 of a 12-node chain
// over 100 Mbit/s links mid-cast. Nothing tells the others: the server
// notices the silence, takes pc05 out and has pc04 feed pc06 from where
// pc06 is. The other eleven finish byte-identical, little later than in an
// unhurt cast.
func TestChainSurvivesALinkCut(t *testing.T) {
	requireLab(t)
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	const nodes, mbit, cut = 12, 100.0, 4 // cut: index of pc05
	const detection = 2 * time.Second
	// Long enough that 10% of the cast is more than the timing noise of
	// rewiring on a busy machine.
	const size = 64 << 20

	dir := t.TempDir()
	img, want := writeImage(t, dir, size, 29, testimage.Dense)
	l := newShapedLab(ctx, t, dir, nodes, mbit)
	// Nobody probes: a probe costs a second a node and predicts nothing
	// this test checks.
	serverArgs := []string{"-node-timeout", detection.String(), "-no-probe"}
	nodeArgs := []string{"-no-probe"}

	// The same cast unhurt, for its time.
	whole := startLabCast(ctx, t, l, bin, t.TempDir(), img, size, serverArgs, nodeArgs)
	if err := whole.server.Wait(); err != nil {
		t.Fatalf("unhurt cast: %v\n%s", err, whole.log("server"))
	}
	for _, n := range whole.nodes {
		n.Wait()
	}
	baseline := whole.readReport().ElapsedSeconds

	c := startLabCast(ctx, t, l, bin, t.TempDir(), img, size, serverArgs, nodeArgs)
	victim := c.nodes[cut]
	deadline := time.Now().Add(time.Minute)
	for testenv.Written(victim.Process.Pid) < size/3 {
		if time.Now().After(deadline) {
			t.Fatalf("pc05 has not written a third of the image within a minute:\n%s", c.log("pc05"))
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is nothing to wait on
	}
	if err := l.SetLink(ctx, l.Nodes[cut], false); err != nil {
		t.Fatal(err)
	}
	serverErr := c.server.Wait()
	victim.Process.Kill()
	if serverErr == nil {
		t.Fatalf("dolly-server exited 0 with pc05 cut off:\n%s", c.log("server"))
	}
	for i, n := range c.nodes {
		if i == cut {
			continue
		}
		if err := n.Wait(); err != nil {
			t.Errorf("%s: %v\n%s", l.Nodes[i].Name, err, c.log(l.Nodes[i].Name))
		}
		if got, err := testimage.SHA256(c.disks[i], size); err != nil || got != want {
			t.Errorf("%s: sha256 %.12s (%v), image %.12s", l.Nodes[i].Name, got, err, want)
		}
	}
	out := c.log("server")
	for _, w := range []string{"pc05 is out of the cast: no word from it", "pc04 now feeds pc06", "11 of 12 nodes verified"} {
		if !strings.Contains(out, w) {
			t.Errorf("server output lacks %q:\n%s", w, out)
		}
	}
	r := c.readReport()
	limit := baseline*1.1 + detection.Seconds()
	t.Logf("12-node chain over %v Mbit/s: unhurt %.1fs; pc05's link cut, %.1fs (limit %.1fs)", mbit, baseline, r.ElapsedSeconds, limit)
	if r.ElapsedSeconds > limit {
		t.Errorf("the cast took %.1fs with pc05 cut off, more than %.1fs (unhurt %.1fs + 10%% + detection %v)", r.ElapsedSeconds, limit, baseline, detection)
	}
}

// TestChainSurvivesARelayPoweringOffAfterItsVerdict cuts pc01's cable the
// moment the server gives it its verdict, as a netbooted node that powers
// off at once (or loses power) would: pc02, behind a slower link, still
// lacks the tail of the stream that only pc01's kernel held. The server
// notices that pc02 stopped short behind an upstream that is gone and has
// the source send it the rest.
func TestChainSurvivesARelayPoweringOffAfterItsVerdict(t *testing.T) {
	requireLab(t)
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const size = 16 << 20
	const detection = 2 * time.Second

	dir := t.TempDir()
	img, want := writeImage(t, dir, size, 31, testimage.Dense)
	// pc02's link is slow, so pc01 finishes with megabytes for pc02 still
	// queued in its own kernel.
	spec := Spec{Server: HostSpec{Name: "srv", Mbit: 1000}, Dir: dir, Nodes: []HostSpec{
		{Name: "pc01", Mbit: 1000},
		{Name: "pc02", Mbit: 10},
	}}
	l, err := New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := startLabCast(ctx, t, l, bin, t.TempDir(), img, size,
		[]string{"-node-timeout", detection.String(), "-no-probe", "-v"}, []string{"-no-probe"})
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(c.log("server"), "msg=verdict node=pc01 ok=true") {
		if time.Now().After(deadline) {
			t.Fatalf("pc01 had no verdict within a minute:\n%s", c.log("server"))
		}
		time.Sleep(10 * time.Millisecond) // polling a log: there is nothing to wait on
	}
	if err := l.SetLink(ctx, l.Nodes[0], false); err != nil {
		t.Fatal(err)
	}
	serverErr := c.server.Wait()
	c.nodes[0].Process.Kill()
	c.nodes[0].Wait()
	out := c.log("server")
	if serverErr != nil {
		t.Fatalf("dolly-server: %v\n%s\npc02:\n%s", serverErr, out, c.log("pc02"))
	}
	if err := c.nodes[1].Wait(); err != nil {
		t.Errorf("pc02: %v\n%s", err, c.log("pc02"))
	}
	for i, h := range l.Nodes {
		if got, err := testimage.SHA256(c.disks[i], size); err != nil || got != want {
			t.Errorf("%s: sha256 %.12s (%v), image %.12s", h.Name, got, err, want)
		}
	}
	for _, w := range []string{"pc01 is gone: went away before pc02 had the whole stream", "dolly-server now feeds pc02", "2 of 2 nodes verified"} {
		if !strings.Contains(out, w) {
			t.Errorf("server output lacks %q:\n%s", w, out)
		}
	}
}
