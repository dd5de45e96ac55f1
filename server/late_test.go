package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"dolly/dolly/node"
	"dolly/imaging"
	"dolly/internal/testimage"
)

// signalWriter is an Out that closes seen once a line holding want was
// written.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.seen != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return n, err
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A PC that joins after the cast started gets the image in the same cast,
// from a stream of its own once the others have theirs, and is verified.
func TestLateNodeJoinsTheCast(t *testing.T) {
	const size = 12<<20 + 4321
	imgs, want := images(t, size)
	targets := oldDisks(t, 3, size)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := &signalWriter{want: "targets:", seen: make(chan struct{})}
	started := out.seen
	cfg := Config{Image: imgs[imaging.Raw], Listen: "127.0.0.1:0", Nodes: 2, NoProbe: true, Out: out, Yes: true,
		MaxRate: 2e6} // slow enough that the late node comes while the others cast
	addrc := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { addrc <- a.String() }
	var sum Summary
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		sum, err = Run(ctx, cfg)
	}()
	addr := <-addrc
	nodeErrs := make([]error, len(targets))
	var wg sync.WaitGroup
	join := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, nodeErrs[i] = node.Run(ctx, node.Config{Server: addr, Target: targets[i], Name: fmt.Sprintf("pc%02d", i+1),
				DataListen: "127.0.0.1:0", JoinTimeout: 5 * time.Second, NoProbe: true})
		}()
	}
	join(0)
	join(1)
	select {
	case <-started:
	case <-done:
		t.Fatalf("the cast ended before it started: %v\n%s", err, out)
	}
	join(2)
	wg.Wait()
	<-done
	if err != nil {
		t.Fatalf("cast: %v\n%s", err, out)
	}
	for i, e := range nodeErrs {
		if e != nil {
			t.Errorf("pc%02d: %v", i+1, e)
		}
	}
	for i, tg := range targets {
		got, err := testimage.SHA256(tg, size)
		if err != nil || got != want {
			t.Errorf("pc%02d's target: sha256 %s, want %s (%v)", i+1, got, want, err)
		}
	}
	if sum.Verified != 3 {
		t.Fatalf("%d of 3 verified\n%s", sum.Verified, out)
	}
	var late NodeSummary
	for _, n := range sum.Nodes {
		if n.Name == "pc03" {
			late = n
		}
	}
	if !late.Late || !late.Verified {
		t.Errorf("pc03: %+v, want verified and late\n%s", late, out)
	}
	if !strings.Contains(out.String(), "pc03 joined late") {
		t.Errorf("the console does not say pc03 joined late:\n%s", out)
	}
}
