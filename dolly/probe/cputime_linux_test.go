package probe

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// The kernel threads' clock counts what the kernel's own threads run: a
// sync of dirty pages puts writeback work on them, which the writer's own
// CPU time does not show.
func TestKernelThreadsCount(t *testing.T) {
	k := FindKernelThreads()
	if len(k.schedstat) == 0 {
		t.Skip("no kernel threads visible in /proc (a PID namespace of its own?)")
	}
	if _, err := os.Stat(k.schedstat[0]); err != nil {
		t.Skipf("no schedstat: %v", err)
	}
	if got := k.Since(); got > time.Second {
		t.Fatalf("kernel threads ran %v between two reads in a row", got)
	}
	// Work the kernel does in its threads: dirty pages written back.
	f, err := os.CreateTemp(t.TempDir(), "dirty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var ran time.Duration
	for i := 0; i < 64 && ran == 0; i++ {
		for j := 0; j < 16; j++ {
			if _, err := f.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		if err := exec.Command("sync").Run(); err != nil {
			t.Fatal(err)
		}
		ran = k.Since()
	}
	if ran <= 0 {
		t.Fatal("the kernel threads' clock did not move while the kernel wrote dirty pages back")
	}
	t.Logf("kernel threads ran %v", ran)
}
