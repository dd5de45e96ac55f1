package server

import (
	"context"
	"testing"
	"time"
)

// After a stall the pacer does not make up for lost time: the bytes sent
// right after it are at most a burst ahead of the rate.
func TestPacerDoesNotCatchUpAfterAStall(t *testing.T) {
	const rate = 10e6 // bytes per second
	p := newPacer(rate)
	ctx := context.Background()
	if err := p.wait(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the stall itself: nothing is sent (a slow child)
	start := time.Now()
	const n = 2 << 20
	if err := p.wait(ctx, n); err != nil {
		t.Fatal(err)
	}
	// At the rate, 2 MiB take about 0.21 s; with the burst the bucket
	// held (0.05 s of rate), at least 0.16 s. An average-keeping pacer
	// would let 2 MB pass at once after a 0.2 s stall. Only a lower
	// bound: a busy machine makes it slower, never faster.
	least := time.Duration(float64(n-p.lim.Burst()) / rate * float64(time.Second))
	if took := time.Since(start); took < least*9/10 {
		t.Errorf("2 MiB after a stall passed in %v; at %v MB/s they take at least %v", took, rate/1e6, least)
	}
}

func TestPacerWithoutLimit(t *testing.T) {
	p := newPacer(0)
	if err := p.wait(context.Background(), 1<<30); err != nil {
		t.Fatal(err)
	}
}
