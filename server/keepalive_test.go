package server

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"dolly/dolly/node"
	"dolly/internal/testimage"
)

// A node that is ready long before the others join (PCs boot over
// minutes) hears from the server meanwhile, and does not take it for lost.
func TestWaitingNodeKeepsTheServer(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	if err := testimage.Write(img, 1<<20, 3, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addrc := make(chan string, 1)
	ran := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Config{Image: img, Nodes: 2, Listen: "127.0.0.1:0", NoProbe: true, Yes: true, Out: io.Discard,
			NodeTimeout: time.Second, Ready: func(a net.Addr) { addrc <- a.String() }})
		ran <- err
	}()
	addr := <-addrc
	join := func(name string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := node.Run(ctx, node.Config{Server: addr, Target: filepath.Join(dir, name), Name: name,
				DataListen: "127.0.0.1:0", NoProbe: true, ServerTimeout: 1500 * time.Millisecond})
			done <- err
		}()
		return done
	}
	first := join("pc01")
	// The second comes well after the first's server timeout.
	select {
	case err := <-first:
		t.Fatalf("pc01 gave up while waiting for pc02: %v", err)
	case <-time.After(4 * time.Second):
	}
	second := join("pc02")
	for _, done := range []<-chan error{first, second} {
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	}
	if err := <-ran; err != nil {
		t.Error(err)
	}
}
