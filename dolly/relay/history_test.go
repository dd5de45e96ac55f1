package relay

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/iotest"
	"time"
)

func TestHistoryPassesEverythingThrough(t *testing.T) {
	data := randomBytes(5<<20+77, 9)
	h := newHistory(make([]byte, 64<<10))
	go fill(h, iotest.HalfReader(bytes.NewReader(data)))
	got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(h, 100)))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(h)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), data) {
		t.Fatal("the reader did not get the stream as it was filled")
	}
}

func TestHistoryServesRecentBytes(t *testing.T) {
	data := randomBytes(3<<20, 10)
	const size = 1 << 20
	h := newHistory(make([]byte, size))
	done := make(chan error, 1)
	go func() { done <- fill(h, bytes.NewReader(data)) }()
	// Read 2 MiB; the history then holds the last 1 MiB of what was read
	// (and what was filled beyond it).
	if _, err := io.ReadFull(h, make([]byte, 2<<20)); err != nil {
		t.Fatal(err)
	}
	if err := h.waitEnd(2 << 20); err != nil {
		t.Fatal(err)
	}
	from := int64(2<<20 - 300_000)
	release, ok := h.hold(from)
	if !ok {
		start, end := h.bounds()
		t.Fatalf("offset %d not held; history holds [%d, %d)", from, start, end)
	}
	// Reading on while the hold is in place must not overwrite it.
	go io.Copy(io.Discard, h)
	var out bytes.Buffer
	if err := h.writeRange(&out, from, from+250_000); err != nil {
		t.Fatal(err)
	}
	release()
	if !bytes.Equal(out.Bytes(), data[from:from+250_000]) {
		t.Fatal("a catch-up got other bytes than the stream's")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := h.hold(0); ok {
		t.Fatal("the history claims to hold offset 0 after 3 MiB through a 1 MiB buffer")
	}
}

// A hold keeps the history from moving past it: filling waits.
func TestHistoryHoldBlocksFilling(t *testing.T) {
	h := newHistory(make([]byte, 1<<16))
	r := rand.New(rand.NewPCG(1, 1))
	src := io.LimitReader(readerFunc(func(p []byte) (int, error) {
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return len(p), nil
	}), 1<<20)
	release, ok := h.hold(0)
	if !ok {
		t.Fatal("offset 0 not held at the start")
	}
	filled := make(chan struct{})
	go func() { fill(h, src); close(filled) }()
	go io.Copy(io.Discard, h)
	if err := h.waitEnd(1 << 16); err != nil {
		t.Fatal(err)
	}
	select {
	case <-filled:
		t.Fatal("filling went past a hold")
	default:
	}
	_, end := h.bounds()
	if end > 1<<16 {
		t.Fatalf("history filled to %d past a hold at 0 with room for %d", end, 1<<16)
	}
	release()
	<-filled
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Loans of any size, in place or across the wrap, hand the reader the
// stream as it was filled, and what was lent stays intact until the next
// loan even while filling goes on.
func TestHistoryLendsTheStreamInPlace(t *testing.T) {
	data := randomBytes(1<<20+5, 11)
	const size = 256 << 10
	for _, loan := range []int{1, 1000, 64 << 10, size / 2, size/2 + 1, size} {
		h := newHistory(make([]byte, size))
		go fill(h, iotest.HalfReader(bytes.NewReader(data)))
		var got []byte
		for len(got) < len(data) {
			b, err := h.Lend(min(loan, len(data)-len(got)))
			if err != nil {
				t.Fatalf("loans of %d: after %d bytes: %v", loan, len(got), err)
			}
			want := data[len(got) : len(got)+len(b)]
			if !bytes.Equal(b, want) {
				t.Fatalf("loans of %d: the loan at %d is not the stream's bytes", loan, len(got))
			}
			// Filling runs on meanwhile; the loan must still hold.
			runtime.Gosched()
			if !bytes.Equal(b, want) {
				t.Fatalf("loans of %d: the loan at %d was overwritten before the next", loan, len(got))
			}
			got = append(got, b...)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("loans of %d: the reader did not get the stream", loan)
		}
	}
}

// A loan that the stream ends in the middle of is a truncation, and the
// relay learns that the reader has taken all it could.
func TestHistoryLoanCutShort(t *testing.T) {
	h := newHistory(make([]byte, 1<<20))
	go fill(h, bytes.NewReader(randomBytes(1000, 12)))
	if _, err := h.Lend(600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lend(600); err != io.ErrUnexpectedEOF {
		t.Fatalf("loan past the end: %v, want %v", err, io.ErrUnexpectedEOF)
	}
	h2 := newHistory(make([]byte, 1<<20))
	pr, pw := io.Pipe()
	go fill(h2, pr)
	pw.Write(randomBytes(1000, 13))
	go h2.Lend(1200) // waits for bytes the upstream never sends
	if h2.waitSettled(context.Background(), 1000) {
		t.Fatal("a stream cut short inside a frame was taken as complete")
	}
	pw.Close()
}

// fill puts everything src yields into h and then ends it, as a relay does
// with its stream.
func fill(h *history, src io.Reader) error {
	for {
		_, err := h.put(1<<20, src.Read)
		if err == io.EOF {
			h.close(nil)
			return nil
		}
		if err != nil {
			h.close(err)
			return err
		}
	}
}

// A yielding reader holds off until the history is nearly full, then
// reads only as much as keeps room for what comes; once it stops
// yielding it reads on, and it gets the stream as it was filled.
func TestHistoryYieldingReaderHoldsOffUntilNearlyFull(t *testing.T) {
	const size = 16 << 20
	data := randomBytes(24<<20, 12)
	h := newHistory(make([]byte, size))
	h.setYield(true)
	if err := h.write(data[:10<<20]); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 64)
	go func() {
		for {
			b := make([]byte, 1<<20)
			if _, err := io.ReadFull(h, b); err != nil {
				close(got)
				return
			}
			got <- b
		}
	}()
	readAt := func() int64 { t.Helper(); return holdingAt(t, h) }
	if at := readAt(); at != 0 {
		t.Fatalf("the reader read to %d with 6 MiB of 16 free", at)
	}
	// 3 MiB free: it reads until more than YieldRoom (4 MiB) is free.
	if err := h.write(data[10<<20 : 13<<20]); err != nil {
		t.Fatal(err)
	}
	var out []byte
	out = append(out, <-got...)
	out = append(out, <-got...)
	if at := readAt(); at != 2<<20 {
		t.Fatalf("the reader read to %d with 3 MiB free; want 2 MiB, which leaves 5 MiB free", at)
	}
	h.setYield(false)
	go func() {
		h.write(data[13<<20:])
		h.close(nil)
	}()
	for b := range got {
		out = append(out, b...)
	}
	if !bytes.Equal(out, data) {
		t.Fatal("the yielding reader did not get the stream as it was filled")
	}
}

// The end of the stream frees a yielding reader: it reads what is left.
func TestHistoryYieldingReaderReadsToTheEnd(t *testing.T) {
	data := randomBytes(3<<20, 13)
	h := newHistory(make([]byte, 16<<20))
	h.setYield(true)
	go func() {
		h.write(data)
		h.close(nil)
	}()
	out, err := io.ReadAll(h)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Fatal("the yielding reader did not get the whole stream")
	}
}

// holdingAt waits until h's reader holds off and says where it is.
func holdingAt(t *testing.T, h *history) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer h.wakeWhenDone(ctx)()
	h.mu.Lock()
	defer h.mu.Unlock()
	for !h.holding && ctx.Err() == nil {
		h.cond.Wait()
	}
	if !h.holding {
		t.Fatalf("the reader does not hold off; it read to %d of %d", h.read, h.end)
	}
	return h.read
}

// An upstream that stops lets a yielding reader read what is here, so that
// the relay can tell a cut stream; once another upstream sends, the reader
// yields again.
func TestHistoryYieldsAgainAfterItsUpstreamStopped(t *testing.T) {
	data := randomBytes(3<<20, 14)
	h := newHistory(make([]byte, 16<<20))
	h.setYield(true)
	if err := h.write(data[:2<<20]); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(h)
		got <- b
	}()
	if at := holdingAt(t, h); at != 0 {
		t.Fatalf("the reader read to %d with 14 MiB free", at)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h.waitSettled(ctx, 2<<20) {
		t.Fatal("a stream without its end frame settled as complete")
	}
	if ctx.Err() != nil {
		t.Fatal("the relay waited in vain for a yielding reader to read what came before the stop")
	}
	if err := h.write(data[2<<20:]); err != nil {
		t.Fatal(err)
	}
	// It may take what it was waiting for when the bytes came, no more.
	if at := holdingAt(t, h); at < 2<<20 || at >= 3<<20 {
		t.Fatalf("the reader read to %d of 3 MiB: want it holding off again past what came before the stop", at)
	}
	h.close(nil)
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatal("the reader did not get the stream as it was filled")
	}
}
