package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// A verified PC that netboots again is sent to its disk, by any of its
// MACs; others are not; the wait after the cast ends once all were sent.
func TestDiskBoots(t *testing.T) {
	d := newDiskBoots()
	d.add("pc01", []string{"52:54:00:12:34:01", "52:54:00:AA:BB:01"})
	d.add("pc02", []string{"52:54:00:12:34:02"})
	if why := d.why("52:54:00:12:34:03"); why != "" {
		t.Errorf("a PC not in the cast is sent to its disk: %q", why)
	}
	if why := d.why("52:54:00:aa:bb:01"); why != "pc01 is verified in this cast" {
		t.Errorf("pc01 by its second MAC: %q", why)
	}
	// A PC counts as sent once it has what sends it there, not when
	// asked about.
	if left, of := d.left(); left != 2 || of != 2 {
		t.Errorf("left %d of %d before any was sent, want 2 of 2", left, of)
	}
	d.sentTo("52:54:00:aa:bb:01")
	d.sentTo("52:54:00:12:34:03") // not in the cast: no effect
	if left, of := d.left(); left != 1 || of != 2 {
		t.Errorf("left %d of %d, want 1 of 2", left, of)
	}
	out := &signalWriter{wrote: make(chan struct{}, 8)}
	done := make(chan struct{})
	go func() {
		d.await(context.Background(), time.Minute, out)
		close(done)
	}()
	<-out.wrote // waiting for pc02
	d.sentTo("52:54:00:12:34:02")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end once every PC was sent to its disk")
	}
	if !strings.Contains(out.String(), "all 2 PCs were sent to their own disks") {
		t.Errorf("output: %q", out.String())
	}
	// Once the cast is over, a PC that was not in it boots its disk too:
	// no cast waits for it.
	if why := d.why("52:54:00:12:34:03"); why != "" {
		t.Errorf("a PC not in the running cast is sent to its disk: %q", why)
	}
	d.castOver()
	if why := d.why("52:54:00:12:34:03"); why != "no cast is running" {
		t.Errorf("a PC netbooting after the cast: %q", why)
	}
	if why := d.why("52:54:00:12:34:02"); why != "pc02 is verified in this cast" {
		t.Errorf("pc02 after the cast: %q", why)
	}

	// The wait is bounded, and says who did not come back.
	d = newDiskBoots()
	d.add("pc01", []string{"52:54:00:12:34:01"})
	var bounded bytes.Buffer
	d.await(context.Background(), 10*time.Millisecond, &bounded)
	if !strings.Contains(bounded.String(), "1 of 1 PCs did not netboot again") {
		t.Errorf("output: %q", bounded.String())
	}
}

// signalWriter keeps what is written and signals each write.
type signalWriter struct {
	bytes.Buffer
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	w.wrote <- struct{}{}
	return n, err
}
