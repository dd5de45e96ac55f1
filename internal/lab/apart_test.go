package lab

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	spec := Spec{Server: HostSpec{Name: "srv", Mbit: mbit}, Dir: dir}
	for i := range fast + 1 {
		spec.Nodes = append(spec.Nodes, HostSpec{Name: fmt.Sprintf("pc%02d", i+1), Mbit: mbit})
	}
	spec.Nodes[2].Mbit = slowMbit // pc03, in the middle of the chain
	l, err := New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

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
