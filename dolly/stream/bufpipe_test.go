package stream

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// What goes into a bufPipe comes out whole and in order, whatever the
// sizes of the writes and reads; the writer's error ends the reader's
// stream, and a reader that stops ends the writer's.
func TestBufPipe(t *testing.T) {
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	p := newBufPipe(4)
	go func() {
		for off, n := 0, 1; off < len(want); off, n = off+n, n*3%65521+1 {
			n = min(n, len(want)-off)
			if _, err := p.Write(want[off : off+n]); err != nil {
				t.Errorf("write: %v", err)
				return
			}
		}
		p.CloseWriter(nil)
	}()
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(want))
	}

	broken := errors.New("image unreadable")
	p = newBufPipe(4)
	p.Write([]byte("abc"))
	p.CloseWriter(broken)
	if got, err := io.ReadAll(p); string(got) != "abc" || !errors.Is(err, broken) {
		t.Fatalf("after the writer's error: read %q, %v", got, err)
	}

	stopped := errors.New("encoder closed")
	p = newBufPipe(1)
	p.Write([]byte("x"))
	p.CloseReader(stopped)
	for i := range 3 { // with the slot full or free, none may block or pass
		if _, err := p.Write([]byte("x")); !errors.Is(err, stopped) {
			t.Fatalf("write %d after the reader stopped: %v, want %v", i+1, err, stopped)
		}
		if i == 0 {
			<-p.blocks // the slot is free again
		}
	}
}

// A block given to a bufPipe is handed back only once its last byte has
// been read out, and every block is handed back in turn.
func TestBufPipeHandsBackSpentBlocks(t *testing.T) {
	p := newBufPipe(4)
	var spent [][]byte
	p.spent = func(b []byte) { spent = append(spent, b) }
	blocks := [][]byte{[]byte("abcdef"), []byte("gh"), []byte("ijkl")}
	for _, b := range blocks {
		if err := p.give(b); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseWriter(nil)
	buf := make([]byte, 4)
	var got []byte
	for {
		n, err := p.Read(buf)
		got = append(got, buf[:n]...)
		// Handed back: all the blocks wholly read before this read.
		whole := 0
		for i, total := 0, 0; i < len(blocks); i++ {
			if total += len(blocks[i]); total <= len(got)-n {
				whole++
			}
		}
		if len(spent) > whole {
			t.Fatalf("after %q, %d blocks handed back, but only %d were read out before", got, len(spent), whole)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "abcdefghijkl" || len(spent) != len(blocks) {
		t.Fatalf("read %q, %d blocks handed back; want all of them, %d", got, len(spent), len(blocks))
	}
	for i, b := range spent {
		if &b[0] != &blocks[i][0] {
			t.Errorf("block %d handed back is not the one given", i)
		}
	}
}
