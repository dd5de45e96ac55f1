package probe

import (
	"errors"
	"io"
	"math"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// The rate leaves out the probe's start: a slow start, then a steady
// 10 MB/s, reads as 10 MB/s.
func TestMeterSteadyRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name  string
		build func(m *meter)
		want  float64
	}{
		{"steady", func(m *meter) {
			for i := range 101 {
				m.add(t0.Add(time.Duration(i)*10*time.Millisecond), 100_000)
			}
		}, 10e6},
		{"slow start", func(m *meter) {
			at := t0
			for range 10 { // 100 ms at 1 MB/s
				m.add(at, 10_000)
				at = at.Add(10 * time.Millisecond)
			}
			for range 100 { // 1 s at 10 MB/s
				m.add(at, 100_000)
				at = at.Add(10 * time.Millisecond)
			}
		}, 10e6},
		{"one read", func(m *meter) { m.add(t0, 5000) }, 0},
		{"nothing", func(m *meter) {}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m meter
			tt.build(&m)
			got := m.received()
			if tt.want == 0 && got.Rate != 0 || tt.want > 0 && math.Abs(got.Rate-tt.want)/tt.want > 0.02 {
				t.Fatalf("rate %.0f B/s, want %.0f", got.Rate, tt.want)
			}
		})
	}
}

// What SendFor writes, Receive counts, and the time bound holds.
func TestSendForAndReceive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan Received, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- Received{}
			return
		}
		defer c.Close()
		got <- Receive(c, time.Now().Add(10*time.Second))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sent, err := SendFor(t.Context(), c, 200*time.Millisecond, 1<<40)
	c.Close() // as the callers do: it resets the connection
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("sending for 200ms took %v", took)
	}
	r := <-got
	if r.Bytes > sent || r.Bytes == 0 {
		t.Fatalf("sent %d bytes, received %d", sent, r.Bytes)
	}
	if r.Rate <= 0 {
		t.Fatalf("no rate from %d bytes", r.Bytes)
	}
	// The byte bound holds too.
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			got <- Receive(c, time.Now().Add(10*time.Second))
		}
	}()
	if sent, err := SendFor(t.Context(), c2, time.Minute, 3<<20); err != nil || sent != 3<<20 {
		t.Fatalf("SendFor bounded at 3 MiB sent %d, %v", sent, err)
	}
	if r := <-got; r.Bytes != 3<<20 {
		t.Fatalf("received %d, want %d", r.Bytes, 3<<20)
	}
}

// At its deadline a probe leaves nothing behind: what the socket still
// holds is dropped when it is closed, rather than keeping the link busy
// after the probe's time.
func TestSendForDropsWhatIsLeftAtTheDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc := <-accepted
	if rc == nil {
		t.Fatal("no connection accepted")
	}
	defer rc.Close()
	// The receiver reads nothing while the probe runs, so the sender's
	// socket fills and holds bytes at the deadline.
	sent, err := SendFor(t.Context(), c, 500*time.Millisecond, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if sent == 0 {
		t.Skip("the machine held the sender off for the whole probe: nothing to drop")
	}
	c.Close()
	rc.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, rc)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the receiver read to %v, want the connection reset", err)
	}
	if n >= sent {
		t.Errorf("the receiver got all %d bytes sent; want those left in the sender's socket dropped", sent)
	}
}

// A window counts the writes that end within it, whoever makes them, in
// writes of the chunk given; none before it opens or after it closes.
func TestSendCountedWindow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				Receive(c, time.Now().Add(10*time.Second))
			}()
		}
	}()
	now := time.Now()
	for _, tc := range []struct {
		name     string
		from, to time.Time
		counted  bool // every byte, or none
	}{
		{"open throughout", now.Add(-time.Second), now.Add(10 * time.Second), true},
		{"not open yet", now.Add(time.Minute), now.Add(2 * time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w := NewWindow(tc.from, tc.to, 0)
			sent, err := SendCounted(t.Context(), c, time.Minute, 3<<20, 5000, w)
			if err != nil || sent != 3<<20 {
				t.Fatalf("sent %d, %v; want 3 MiB", sent, err)
			}
			var counted int64
			for i := range w.bins {
				counted += w.bins[i].Load()
			}
			if want := map[bool]int64{true: sent, false: 0}[tc.counted]; counted != want {
				t.Errorf("the window counted %d of %d bytes, want %d", counted, sent, want)
			}
		})
	}
}

// A sender that starts late fills its send buffer at once, which the link
// carries only later: the count starts Settle after the last one started.
func TestWindowWaitsForTheLastSender(t *testing.T) {
	t0 := time.Now()
	w := NewWindow(t0.Add(100*time.Millisecond), t0.Add(time.Second), 100*time.Millisecond)
	w.start(t0, nil)
	w.add(t0.Add(50*time.Millisecond), 1000)   // before the window
	w.add(t0.Add(1500*time.Millisecond), 1000) // after it
	w.add(t0.Add(200*time.Millisecond), 900)
	if got, want := w.Rate(), 900/0.9; math.Abs(got-want) > 1e-6 {
		t.Errorf("rate %v, want %v", got, want)
	}
	w.start(t0.Add(500*time.Millisecond), nil) // a late sender
	w.add(t0.Add(550*time.Millisecond), 5000)
	w.add(t0.Add(700*time.Millisecond), 800)
	if got, want := w.Rate(), 800/0.4; math.Abs(got-want) > 1e-6 {
		t.Errorf("with a late sender, rate %v, want %v", got, want)
	}
	w.start(t0.Add(950*time.Millisecond), nil)
	if got := w.Rate(); got != 0 {
		t.Errorf("no time left to count, rate %v", got)
	}
}

// A window asked of real sockets counts what their peers acknowledged:
// every byte sent, once the receiver has read them all, whatever the send
// buffers held in between.
func TestWindowCountsAcknowledgements(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no TCP acknowledgement count on " + runtime.GOOS)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		got <- Receive(c, time.Now().Add(10*time.Second)).Bytes
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	w := NewWindow(now.Add(-time.Second), now.Add(time.Minute), 0)
	w.start(now.Add(-2*time.Second), c)
	w.sample(now.Add(-time.Second))
	const size = 8 << 20
	if sent, err := SendFor(t.Context(), c, time.Minute, size); err != nil || sent != size {
		t.Fatalf("sent %d, %v; want %d", sent, err, size)
	}
	if n := <-got; n != size {
		t.Fatalf("the receiver read %d bytes, want %d", n, size)
	}
	// The last acknowledgement may trail the receiver's last read. The
	// connection's SYN and FIN take a byte of the count each.
	var acked int64
	for range 100 {
		if acked, err = ackedBytes(c); err != nil || acked >= size+2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if acked != size+2 {
		t.Fatalf("the socket says %d bytes acknowledged (%v), want %d and its SYN and FIN", acked, err, size)
	}
	w.sample(now.Add(time.Second))
	if r, ok := w.ackedRate(now.Add(-time.Second)); !ok || r != (size+1)/2.0 {
		t.Errorf("rate from acknowledgements %v (%v), want %v: %d bytes and the FIN over the 2 s between the samples", r, ok, (size+1)/2.0, size)
	}
}

// The rate from acknowledgements runs from the first sample that asked
// every sender, settle after the last started, to the last sample.
func TestWindowAckedRate(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name    string
		blind   bool
		lastMS  int // when the last sender started
		samples []ackSample
		want    float64
		ok      bool
	}{
		{"steady", false, 0, []ackSample{{at(100), 1000, 2}, {at(200), 2000, 2}, {at(400), 5000, 2}}, 4000 / 0.3, true},
		{"a late sender", false, 150, []ackSample{{at(100), 1000, 1}, {at(200), 2000, 2}, {at(300), 4000, 2}, {at(400), 5000, 2}}, 3000 / 0.2, true},
		{"a sender that cannot tell", true, 0, []ackSample{{at(100), 1000, 2}, {at(400), 5000, 2}}, 0, false},
		{"no time after the last start", false, 390, []ackSample{{at(100), 1000, 2}, {at(400), 5000, 2}}, 0, true},
		{"one sample", false, 0, []ackSample{{at(100), 1000, 2}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWindow(at(100), at(400), 50*time.Millisecond)
			w.start(at(tc.lastMS), nil)
			w.senders = []*ackedSender{{}, {}}
			w.blind, w.samples = tc.blind, tc.samples
			r, ok := w.ackedRate(at(max(100, tc.lastMS+50)))
			if ok != tc.ok || math.Abs(r-tc.want) > 1e-6 {
				t.Errorf("rate %v (%v), want %v (%v)", r, ok, tc.want, tc.ok)
			}
		})
	}
}
