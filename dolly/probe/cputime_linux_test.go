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

// /proc/stat's first line splits into busy, stolen and idle time; a line
// that is not the CPUs' total reads as nothing.
func TestParseCPUTimes(t *testing.T) {
	tick := 10 * time.Millisecond
	tests := []struct {
		line string
		want CPUTimes
	}{
		{"cpu  100 2 300 4000 50 6 70 8 9 10", CPUTimes{Busy: (100 + 2 + 300 + 6 + 70) * tick, Steal: 8 * tick, Idle: (4000 + 50) * tick}},
		{"cpu 1 0 1 10 0 0 0", CPUTimes{Busy: 2 * tick, Idle: 10 * tick}}, // an old kernel: no steal column
		{"cpu0 100 2 300 4000 50 6 70 8 9 10", CPUTimes{}},
		{"cpu  100 x 300 4000 50", CPUTimes{}},
		{"", CPUTimes{}},
	}
	for _, tt := range tests {
		if got := parseCPUTimes(tt.line); got != tt.want {
			t.Errorf("parseCPUTimes(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
	// The machine's own: some time has passed since boot.
	if got := ReadCPUTimes(); got.Total() <= 0 || got.Busy <= 0 {
		t.Errorf("ReadCPUTimes() = %+v on this machine", got)
	}
}
