package probe

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Bandwidth probes measure the network as a plan would load it: a sender
// writes to a receiver for a short while, every sender of a pattern at
// once (the server to every node, as a star does; each node to the next,
// as a chain does), and each receiver counts what arrived. A link's speed
// as the NIC reports it is only a ceiling: a switch, a shaper or a shared
// uplink may allow less, and only traffic tells.

// Received is what a receiver counted of one probe.
type Received struct {
	Bytes int64
	// Rate is bytes per second over the probe's steady part: the first
	// quarter of its time (TCP's slow start, a shaper's burst) is left
	// out. 0 when too little arrived to tell.
	Rate float64
}

// SendFor writes to c until d has passed or limit bytes are out, or ctx
// ends, and returns the bytes written. Once limit bytes are out it
// half-closes c, so the receiver counts them all. At the deadline it sets
// c to reset when closed instead: what the socket still holds would keep
// the link busy after the probe's time (many megabytes when a source sends
// to many nodes at once through one link, a second or more at 100 Mbit/s),
// and the receiver's rate needs none of it.
func SendFor(ctx context.Context, c net.Conn, d time.Duration, limit int64) (int64, error) {
	return SendCounted(ctx, c, d, limit, 256<<10, nil)
}

// SendCounted is SendFor in writes of chunk bytes, each counted in w (if
// not nil) when it ends within w's span.
func SendCounted(ctx context.Context, c net.Conn, d time.Duration, limit int64, chunk int, w *Window) (int64, error) {
	stop := context.AfterFunc(ctx, func() { c.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetWriteDeadline(time.Now().Add(d))
	defer c.SetWriteDeadline(time.Time{})
	buf := make([]byte, max(chunk, 1))
	if w != nil {
		w.start(time.Now(), c)
	}
	var sent int64
	for sent < limit {
		n, err := c.Write(buf[:min(int64(len(buf)), limit-sent)])
		sent += int64(n)
		if w != nil {
			w.add(time.Now(), n)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if l, ok := c.(interface{ SetLinger(int) error }); ok {
				l.SetLinger(0)
				return sent, nil
			}
			break
		}
		if err != nil {
			return sent, err
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	return sent, nil
}

// A Window counts what several senders carried over one span of time, on
// the senders' one clock. Each receiver of a star can only count over its
// own stream's span, and the streams share the link unevenly over time (one
// gets more early on, another late), so the sum of their rates is more
// than the link carried. What the receivers acknowledged to the senders in
// one window, once the streams are all under way, is what it carried.
//
// Where a sender's socket cannot tell what its peer acknowledged, the
// window counts what the senders wrote instead, which matches it once the
// send buffers are full and each write waits for acknowledgements, but
// strays by what the buffers gain or lose over the window (a tenth of a
// 300 ms window, seen on a star of 4 at 100 Mbit/s).
type Window struct {
	from, to time.Time
	settle   time.Duration
	bins     []atomic.Int64 // bytes whose write ended in each windowBin from from
	last     atomic.Int64   // when the last sender started, in Unix nanoseconds

	mu      sync.Mutex
	senders []*ackedSender
	blind   bool // a sender's socket cannot tell what its peer acknowledged
	samples []ackSample
}

// ackedSender is one sender's socket and what its peer had acknowledged
// when last asked.
type ackedSender struct {
	c     net.Conn
	acked int64
}

// ackSample is what all senders' peers had acknowledged at one time.
type ackSample struct {
	at      time.Time
	acked   int64
	senders int
}

// windowBin is the grain of a Window's count of writes; ackEvery that of
// its samples of acknowledgements.
const (
	windowBin = time.Millisecond
	ackEvery  = 5 * time.Millisecond
)

// NewWindow counts from from to to, and from settle after the last sender
// started: a sender fills its send buffer at once, which the link carries
// only later, and with many receivers the last may start late. Watch
// samples the acknowledgements.
func NewWindow(from, to time.Time, settle time.Duration) *Window {
	n := max(int(to.Sub(from)/windowBin), 0)
	return &Window{from: from, to: from.Add(time.Duration(n) * windowBin), settle: settle, bins: make([]atomic.Int64, n)}
}

// start notes a sender starting at t on c (nil: a sender counted by its
// writes alone).
func (w *Window) start(t time.Time, c net.Conn) {
	for ns := t.UnixNano(); ; {
		old := w.last.Load()
		if ns <= old || w.last.CompareAndSwap(old, ns) {
			break
		}
	}
	if c == nil {
		return
	}
	acked, err := ackedBytes(c)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.blind = true
		return
	}
	w.senders = append(w.senders, &ackedSender{c: c, acked: acked})
}

func (w *Window) add(t time.Time, n int) {
	if i := int(t.Sub(w.from) / windowBin); n > 0 && !t.Before(w.from) && i < len(w.bins) {
		w.bins[i].Add(int64(n))
	}
}

// Watch samples what the senders' peers have acknowledged, every ackEvery
// from the window's start to its end, or until ctx ends.
func (w *Window) Watch(ctx context.Context) {
	next := w.from
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.sample(time.Now())
		if !next.Before(w.to) {
			return
		}
		if next = next.Add(ackEvery); next.After(w.to) {
			next = w.to
		}
		t.Reset(time.Until(next))
	}
}

// sample asks every sender's socket what its peer acknowledged; a socket
// closed since keeps its last answer.
func (w *Window) sample(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum int64
	for _, s := range w.senders {
		if acked, err := ackedBytes(s.c); err == nil {
			s.acked = acked
		}
		sum += s.acked
	}
	w.samples = append(w.samples, ackSample{at: at, acked: sum, senders: len(w.senders)})
}

// Rate is the bytes carried within the window, from settle after the last
// sender started, per second of it; 0 if that leaves no time. It counts
// acknowledgements where Watch sampled them from every sender, and writes
// otherwise.
func (w *Window) Rate() float64 {
	begin := w.from
	if l := time.Unix(0, w.last.Load()).Add(w.settle); l.After(begin) {
		begin = l
	}
	if r, ok := w.ackedRate(begin); ok {
		return r
	}
	first := int((begin.Sub(w.from) + windowBin - 1) / windowBin)
	if first >= len(w.bins) {
		return 0
	}
	var bytes int64
	for i := first; i < len(w.bins); i++ {
		bytes += w.bins[i].Load()
	}
	return float64(bytes) / (time.Duration(len(w.bins)-first) * windowBin).Seconds()
}

// ackedRate is the rate of acknowledgements between the first sample
// from begin that asked every sender and the last sample; false when the
// samples cannot tell.
func (w *Window) ackedRate(begin time.Time) (float64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.blind || len(w.senders) == 0 || len(w.samples) < 2 {
		return 0, false
	}
	all := len(w.senders)
	i := slices.IndexFunc(w.samples, func(s ackSample) bool { return !s.at.Before(begin) && s.senders == all })
	if i < 0 {
		return 0, true
	}
	a, b := w.samples[i], w.samples[len(w.samples)-1]
	if !b.at.After(a.at) {
		return 0, true
	}
	return float64(b.acked-a.acked) / b.at.Sub(a.at).Seconds(), true
}

// Receive reads c until the sender closes it, or deadline, and returns
// what it counted.
func Receive(c net.Conn, deadline time.Time) Received {
	c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 256<<10)
	var m meter
	for {
		n, err := c.Read(buf)
		if n > 0 {
			m.add(time.Now(), int64(n))
		}
		if err != nil {
			break
		}
	}
	return m.received()
}

// meter keeps the running count of a probe's bytes over time.
type meter struct {
	at    []time.Time
	total []int64
}

func (m *meter) add(t time.Time, n int64) {
	var sum int64
	if len(m.total) > 0 {
		sum = m.total[len(m.total)-1]
	}
	m.at, m.total = append(m.at, t), append(m.total, sum+n)
}

// steadyAfter is the share of a probe's time its rate leaves out.
const steadyAfter = 0.25

func (m *meter) received() Received {
	if len(m.at) == 0 {
		return Received{}
	}
	last := len(m.at) - 1
	r := Received{Bytes: m.total[last]}
	first, end := m.at[0], m.at[last]
	from := first.Add(time.Duration(float64(end.Sub(first)) * steadyAfter))
	i := 0
	for i < last && m.at[i].Before(from) {
		i++
	}
	// The bytes counted at sample i arrived before it: the rate runs from
	// the sample before.
	if i == 0 || i >= last {
		return r
	}
	if span := end.Sub(m.at[i-1]).Seconds(); span > 0 {
		r.Rate = float64(m.total[last]-m.total[i-1]) / span
	}
	return r
}
