package relay

import (
	"cmp"
	"sync/atomic"
	"time"
)

// A relay wakes when its upstream socket holds a batch of bytes
// (SO_RCVLOWAT), not for every few packets: each wake-up's syscalls then
// carry more of the stream. But a hop forwards nothing of a batch until
// the batch is whole, so every hop of a chain delays the stream by the
// time its link takes to carry one: a round of 256 KiB is 21 ms at
// 100 Mbit/s, half a second down a chain of 24. The batch is therefore
// what the upstream delivers in wakeDelay at the rate it has been
// delivering, between minWake and a round: a round from 64 MB/s up, where
// it costs a hop at most 4 ms. In the emulated lab's zstd chains at
// 100 Mbit/s (12 MB/s of stream) the nodes spent 10% more CPU on the
// smaller batches, and the last of 8 and of 24 still finished 0.5% and
// 1.4% sooner.
//
// On a machine that more nodes share than it has cores, every wake-up is
// paid for with the others' CPU, and a chain that the machine's cores hold
// back goes faster on fewer of them: the server then has its nodes gather
// CrowdedWakeDelay (Config.WakeDelay). In the emulated lab's zstd chain of
// 24 at 100 Mbit/s (25 hosts on 2 cores, the bench's 1 GiB image) the
// nodes spent 13.1-15.5 CPU-s (a mean of 14.4) instead of 13.7-17.4
// (15.9) over eight casts each.
// Where the links hold the chain back it costs the hops' delay and saves
// nothing anyone needs: the raw chain of 24 ran 2-5% slower on it.
//
// A batch is a wait for bytes still to come, and an upstream may stop short
// of one: a source waiting on a slow child, a re-plan, the last bytes
// before a pause. So a hop that has waited flushFactor times the delay
// wakes for any byte, and starts again from the smallest batch.
const (
	flushFactor      = 4
	wakeDelay        = 4 * time.Millisecond
	CrowdedWakeDelay = 12 * time.Millisecond // where a crowded machine's cores hold the cast back
	minWake          = 16 << 10
	rateWindow       = 50 * time.Millisecond // how long a rate is measured over
)

// wakeSize chooses the wake-up size of a relay's upstream socket from the
// rate the upstream delivers.
type wakeSize struct {
	delay time.Duration // what the batch gathers, at the rate; 0: wakeDelay
	up    Upstream      // the upstream whose size was set
	size  int           // the size set
	since time.Time     // the start of the rate's window
	bytes int           // moved since then

	flushed atomic.Bool // the socket was set to wake for any byte
}

// flushAfter is how long a read waits for a batch before it takes what
// has come.
func (w *wakeSize) flushAfter() time.Duration {
	return flushFactor * cmp.Or(w.delay, wakeDelay)
}

// flush notes that the socket now wakes for any byte; the next read sets
// the batch again, from the smallest.
func (w *wakeSize) flush() { w.flushed.Store(true) }

// next returns the size to set before the next read from up, and whether
// it changed.
func (w *wakeSize) next(up Upstream, round int, now time.Time) (int, bool) {
	if w.flushed.Swap(false) || up != w.up {
		// A new upstream starts at the smallest batch: its rate is
		// unknown, and a slow one must not hold a hop up. So does one
		// that has paused.
		w.up, w.size, w.since, w.bytes = up, min(minWake, round), now, 0
		return w.size, true
	}
	elapsed := now.Sub(w.since)
	if elapsed < rateWindow {
		return w.size, false
	}
	rate := float64(w.bytes) / elapsed.Seconds()
	w.since, w.bytes = now, 0
	size := min(max(int(rate*cmp.Or(w.delay, wakeDelay).Seconds()), minWake), round)
	// Only a clear change is worth a syscall.
	if size*4 < w.size*3 || size*3 > w.size*4 {
		w.size = size
		return size, true
	}
	return w.size, false
}

// moved counts bytes read from the upstream.
func (w *wakeSize) moved(n int) { w.bytes += n }
