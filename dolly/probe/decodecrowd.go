package probe

import (
	"errors"
	"time"
)

// A DecodeCrowd decodes the standard sample with zstd as fast as one thread
// of this node goes, as its own probe does (probeZstdDecode), while other
// nodes of its machine do the same: the way the nodes of a crowded machine
// decode a compressed cast, all at once, their decoders sharing the
// memory system.
type DecodeCrowd struct {
	bench *zstdBench
	cpu   time.Duration // the decoding thread's time over the last window
}

// StartDecodeCrowd sets a DecodeCrowd up: the decoders of a node's own
// probe (probeZstdDecode), set up alike, so that the crowd and the lone
// probe tell the same decoders apart only by the crowd.
func StartDecodeCrowd() (*DecodeCrowd, error) {
	b, err := newZstdBench()
	if err != nil {
		return nil, err
	}
	return &DecodeCrowd{bench: b}, nil
}

// errNoThreadClock is why a DecodeCrowd cannot count where a thread's CPU
// time cannot be read: with every node of the machine decoding at once,
// the wall's time says nothing of one decoder's speed.
var errNoThreadClock = errors.New("no thread CPU clock to time the decoders by")

// PushFor decodes without a pause, from settle on (the time the other
// nodes take to start too) for window, as the lone probe does, and returns
// the bytes of the standard sample decoded in the window and the window's
// wall time; WindowCPU is the decoding thread's CPU time for them.
func (c *DecodeCrowd) PushFor(settle, window time.Duration) (int64, time.Duration, error) {
	c.cpu = 0
	var bytes int64
	var took time.Duration
	var err error
	OnOneThread(func(cpu func() time.Duration) {
		if cpu() == 0 {
			err = errNoThreadClock
			return
		}
		start := time.Now()
		var t0 time.Time
		var t zstdTimings
		for {
			now := time.Now()
			if t0.IsZero() && now.Sub(start) >= settle {
				t0, t = now, zstdTimings{}
			}
			if !t0.IsZero() && now.Sub(t0) >= window && t.both() {
				sample := t.sample()
				bytes, took, c.cpu = sample.bytes, now.Sub(t0), sample.cpu
				return
			}
			if err = c.bench.round(cpu, &t); err != nil {
				return
			}
		}
	})
	if err != nil {
		return 0, 0, err
	}
	return bytes, took, nil
}

// WindowCPU is the decoding thread's CPU time over PushFor's window, on
// the standard sample.
func (c *DecodeCrowd) WindowCPU() time.Duration { return c.cpu }

// Close releases the decoders.
func (c *DecodeCrowd) Close() { c.bench.close() }
