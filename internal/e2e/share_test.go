package e2e

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"dolly/internal/testimage"
)

// On a machine with fewer cores than the cast's hosts, the nodes keep to
// one thread through the probes, and cast a compressed stream on two, so
// that each relay waits for its bytes on a thread of its own; a raw stream
// is cast on one.
func TestCrowdedNodesThreads(t *testing.T) {
	const nodes = 3
	switch cores := runtime.NumCPU(); {
	case cores > nodes:
		t.Skipf("this machine has %d cores, as many as the cast's %d hosts (the source and %d nodes): its nodes are not crowded", cores, nodes+1, nodes)
	case cores < 2:
		t.Skip("this machine has one core: a node cannot be given two threads")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	const size = 16 << 20
	if err := testimage.Write(img, size, 7, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	want, _ := testimage.SHA256(img, -1)
	for _, tt := range []struct {
		compress string
		procs    []string // the threads each node sets, in turn
	}{
		{"yes", []string{"procs=1", "procs=2"}},
		{"no", []string{"procs=1"}},
	} {
		t.Run("compress "+tt.compress, func(t *testing.T) {
			var targets []string
			for i := range nodes {
				p := filepath.Join(dir, fmt.Sprintf("disk-%s-%d", tt.compress, i))
				testimage.Fill(p, 0xFF, size)
				targets = append(targets, p)
			}
			r := runCast(t, []string{"-image", img, "-chain", "-compress", tt.compress}, targets, time.Minute)
			if r.code != 0 {
				t.Fatalf("dolly-server exited %d:\n%s", r.code, r.server.out.String())
			}
			for i, n := range r.nodes {
				out := n.out.String()
				if r.codes[i] != 0 {
					t.Fatalf("dolly %d exited %d:\n%s", i+1, r.codes[i], out)
				}
				if got, _ := testimage.SHA256(targets[i], size); got != want {
					t.Errorf("target %d differs from the image", i+1)
				}
				var set []string
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, "sharing the machine's cores") {
						set = append(set, line[strings.LastIndex(line, "procs="):])
					}
				}
				if fmt.Sprint(set) != fmt.Sprint(tt.procs) {
					t.Errorf("dolly %d set %v, want %v:\n%s", i+1, set, tt.procs, out)
				}
				if cast := strings.Index(out, "msg=casting"); cast < 0 || strings.LastIndex(out, "sharing the machine's cores") > cast {
					t.Errorf("dolly %d was told its share after it began to cast:\n%s", i+1, out)
				}
			}
		})
	}
}
