package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// TestSlowNodeIsServedApart casts over a chain of 100 Mbit/s links where
// one node's link came up at 10 Mbit/s. The plan must serve that node
// apart, from the chain's tail at its own pace, so the others keep their
// links' rate; every node, the slow one too, must end verified.
func TestSlowNodeIsServedApart(t *testing.T) {
	requireLab(t)
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const fast, mbit, slowMbit = 4, 100.0, 10.0
	l := newSlowNodeLab(ctx, t, dir, fast, mbit, slowMbit)

	const size = 24 << 20
	img, want := writeImage(t, dir, size, 31, testimage.Dense)
	c := startLabCast(ctx, t, l, bin, dir, img, size, []string{"-compress", "no"}, nil)
	c.waitVerified(size, want)
	r := c.readReport()
	if r.Verified != fast+1 {
		t.Fatalf("%d of %d verified\nserver:\n%s", r.Verified, fast+1, c.log("server"))
	}
	for _, n := range r.Nodes {
		switch {
		case n.Name == "pc03" && n.ApartFrom == "":
			t.Errorf("pc03, on a %v Mbit/s link, was not served apart\nserver:\n%s", slowMbit, c.log("server"))
		case n.Name != "pc03" && n.ApartFrom != "":
			t.Errorf("%s was served apart", n.Name)
		case n.Name != "pc03" && n.MBps < 0.7*mbit/8:
			// Held to the slow link, they would get 1.25 MB/s.
			t.Errorf("%s: %.2f MB/s over a %v Mbit/s link, with pc03 served apart\nserver:\n%s", n.Name, n.MBps, mbit, c.log("server"))
		case n.Name == "pc03" && n.MBps < 0.7*slowMbit/8:
			t.Errorf("pc03: %.2f MB/s over its %v Mbit/s link", n.MBps, slowMbit)
		}
	}
	t.Logf("%d nodes at %v Mbit/s and pc03 at %v: %s", fast, mbit, slowMbit, describeRates(r))
}

// TestSlowNodeOutlivesItsServer kills the node that serves the slow node
// at its pace, a third of the way into the slow node's stream, when what
// it still needs is past any peer's history: the slow node must finish
// verified all the same, from another source.
func TestSlowNodeOutlivesItsServer(t *testing.T) {
	requireLab(t)
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const fast, mbit, slowMbit = 4, 100.0, 10.0
	l := newSlowNodeLab(ctx, t, dir, fast, mbit, slowMbit)

	const size = 48 << 20 // more than a relay's history
	img, want := writeImage(t, dir, size, 37, testimage.Dense)
	c := startLabCast(ctx, t, l, bin, dir, img, size, []string{"-compress", "no", "-node-timeout", "3s"}, nil)
	slow, tail := c.nodes[2], c.nodes[fast]
	// Polling the log and /proc: there is nothing to wait on.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(c.log("server"), "pc03: served apart by pc05") {
		if time.Now().After(deadline) {
			t.Fatalf("pc03 is not served apart by pc05:\n%s", c.log("server"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its probe wrote to its disk too: count from here.
	base := testenv.Written(slow.Process.Pid)
	deadline = time.Now().Add(2 * time.Minute)
	for testenv.Written(slow.Process.Pid) < base+size/3 {
		if time.Now().After(deadline) {
			t.Fatalf("pc03 has not written a third of the image within two minutes:\n%s", c.log("server"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	tail.Process.Kill()
	tail.Wait()
	if err := c.server.Wait(); err != nil {
		t.Fatalf("dolly-server: %v\n%s", err, c.log("server"))
	}
	for i, n := range c.nodes {
		if i == fast {
			continue
		}
		if err := n.Wait(); err != nil {
			t.Errorf("%s: %v\n%s", l.Nodes[i].Name, err, c.log(l.Nodes[i].Name))
		}
		if got, err := testimage.SHA256(c.disks[i], size); err != nil || got != want {
			t.Errorf("%s: sha256 %.12s (%v), image %.12s", l.Nodes[i].Name, got, err, want)
		}
	}
	r := c.readReport()
	for _, n := range r.Nodes {
		if n.Name == "pc03" && !n.Verified {
			t.Errorf("pc03 not verified: %+v\n%s", n, c.log("server"))
		}
	}
	t.Logf("pc05 killed while serving pc03: %s", describeRates(r))
}

// TestNodeThatSlowsIsMovedApart slows pc03's link from 100 to 10 Mbit/s
// once the cast has started, after the model measured it fast: the chain
// falls to pc03's rate until the server sees pc02 held back by it, then
// serves pc03 apart, and the others finish at their links' rate. With
// -auto the watch checks the cast first, and finds no plan faster.
func TestNodeThatSlowsIsMovedApart(t *testing.T) {
	requireLab(t)
	bin := buildBinaries(t)
	for _, plan := range []string{"-chain", "-auto"} {
		t.Run(plan, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
			defer cancel()
			dir := t.TempDir()
			const nodes, mbit, slowMbit = 5, 100.0, 10.0
			l := newShapedLab(ctx, t, dir, nodes, mbit)
			const size = 48 << 20
			img, want := writeImage(t, dir, size, 41, testimage.Dense)
			c := startLabCast(ctx, t, l, bin, dir, img, size, []string{"-compress", "no", plan}, nil)
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(c.log("server"), "targets:") {
				if time.Now().After(deadline) {
					t.Fatalf("no plan within a minute:\n%s", c.log("server"))
				}
				time.Sleep(20 * time.Millisecond) // polling the log: there is nothing to wait on
			}
			if err := l.SetRate(ctx, l.Nodes[2], slowMbit); err != nil {
				t.Fatal(err)
			}
			c.waitVerified(size, want)
			out := c.log("server")
			if !strings.Contains(out, "pc03 holds the others back") {
				t.Fatalf("pc03 was not moved apart:\n%s", out)
			}
			r := c.readReport()
			var slow float64
			for _, n := range r.Nodes {
				if n.Name == "pc03" {
					slow = n.Seconds
				}
			}
			for _, n := range r.Nodes {
				// Held to pc03 to the end, they would take as long as it.
				if n.Name != "pc03" && n.Seconds > slow/2 {
					t.Errorf("%s took %.1fs, pc03 %.1fs: it was held back\n%s", n.Name, n.Seconds, slow, out)
				}
			}
			t.Logf("%s, pc03 slowed to %v Mbit/s mid-cast: %s", plan, slowMbit, describeRates(r))
		})
	}
}

// TestTwoSwitchesRunAtTheirOwnRates casts over two switches of 1 Gbit/s
// links joined by a 100 Mbit/s trunk, described by a topology file: the
// far switch's nodes are served apart, as a chain of their own fed once
// through the trunk at its rate, so that the source's switch is not held
// to the trunk's rate.
func TestTwoSwitchesRunAtTheirOwnRates(t *testing.T) {
	requireLab(t)
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const perSwitch, mbit, trunk = 4, 1000.0, 100.0
	spec := Spec{Server: HostSpec{Name: "srv", Switch: "sw1", Mbit: mbit}, Dir: dir,
		Switches: []string{"sw1", "sw2"}, Trunks: []Trunk{{A: "sw1", B: "sw2", Mbit: trunk}}}
	for i := range 2 * perSwitch {
		sw := "sw1"
		if i >= perSwitch {
			sw = "sw2"
		}
		spec.Nodes = append(spec.Nodes, HostSpec{Name: fmt.Sprintf("pc%02d", i+1), Switch: sw, Mbit: mbit})
	}
	l, err := New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	topo := filepath.Join(dir, "lab.json")
	b, err := l.Topology(spec)
	if err == nil {
		err = os.WriteFile(topo, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	img, want := writeImage(t, dir, size, 43, testimage.Dense)
	c := startLabCast(ctx, t, l, bin, dir, img, size, []string{"-compress", "no", "-topology", topo}, nil)
	c.waitVerified(size, want)
	r := c.readReport()
	out := c.log("server")
	trunkRate := trunk / 8 * TCPEfficiency
	var slowestNear float64
	for i, n := range r.Nodes {
		far := i >= perSwitch
		if far != (n.ApartFrom != "") {
			t.Errorf("%s (far side: %v) served apart by %q\n%s", n.Name, far, n.ApartFrom, out)
		}
		if far && n.MBps < 0.8*trunkRate {
			t.Errorf("%s, behind the trunk: %.2f MB/s, the trunk carries %.2f\n%s", n.Name, n.MBps, trunkRate, out)
		}
		if !far && (slowestNear == 0 || n.MBps < slowestNear) {
			slowestNear = n.MBps
		}
	}
	// Held to the trunk, the near side would run at the trunk's rate.
	if slowestNear < 2*trunkRate {
		t.Errorf("the source's side ran at %.2f MB/s, the trunk's rate is %.2f\n%s", slowestNear, trunkRate, out)
	}
	// On this one machine the far side leaves the cores to the near side
	// until it is done, and then catches up.
	if !strings.Contains(out, "write as their buffers fill") {
		t.Errorf("the server does not say the far side yields\n%s", out)
	}
	for i, n := range r.Nodes {
		log := c.log(n.Name)
		yielded := strings.Contains(log, "writing as the history fills") && strings.Contains(log, "the plan is done: catching up")
		if far := i >= perSwitch; far != yielded {
			t.Errorf("%s (far side: %v) yielded and caught up: %v\n%s", n.Name, far, yielded, log)
		}
	}
	t.Logf("two switches of %v Mbit/s, trunk %v Mbit/s: %s", mbit, trunk, describeRates(r))
}

// newSlowNodeLab is a lab of fast+1 nodes at mbit but pc03, in the middle
// of the chain, at slowMbit, closed when the test ends.
func newSlowNodeLab(ctx context.Context, t *testing.T, dir string, fast int, mbit, slowMbit float64) *Lab {
	t.Helper()
	spec := Spec{Server: HostSpec{Name: "srv", Mbit: mbit}, Dir: dir}
	for i := range fast + 1 {
		spec.Nodes = append(spec.Nodes, HostSpec{Name: fmt.Sprintf("pc%02d", i+1), Mbit: mbit})
	}
	spec.Nodes[2].Mbit = slowMbit
	l, err := New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
