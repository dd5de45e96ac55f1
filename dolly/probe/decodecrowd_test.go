package probe

import (
	"testing"
	"time"
)

// A decoders' crowd of one decodes at the lone probe's speed (its
// decoders set up alike), give or take the machine's moment, and may be
// pushed again.
func TestDecodeCrowdDecodesAsTheProbeDoes(t *testing.T) {
	var clock bool
	OnOneThread(func(cpu func() time.Duration) { clock = cpu() > 0 })
	if !clock {
		t.Skip("no thread CPU clock here")
	}
	lone, _, err := probeZstdDecode(50 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartDecodeCrowd()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for push := 1; push <= 2; push++ {
		// A settling five times the window: counted, it would put the
		// rate five times too high.
		bytes, took, err := c.PushFor(100*time.Millisecond, 20*time.Millisecond)
		if err != nil {
			t.Fatalf("push %d: %v", push, err)
		}
		if took < 20*time.Millisecond || bytes <= 0 || c.WindowCPU() <= 0 || c.WindowCPU() > took+50*time.Millisecond {
			t.Fatalf("push %d: %d bytes in %v, %v of the thread's time", push, bytes, took, c.WindowCPU())
		}
		// The same decoders on the same sample: within a factor of 4,
		// which a machine's moments do not reach (1.2-2.2 GB/s on the
		// lab's VM), and a crowd that counted the settling would.
		rate := float64(bytes) / c.WindowCPU().Seconds()
		if rate < lone/4 || rate > lone*4 {
			t.Errorf("push %d: %.0f MB/s a core, the probe's %.0f", push, rate/1e6, lone/1e6)
		}
	}
}
