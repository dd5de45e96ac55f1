package server

import (
	"context"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testimage"
)

// TestAttachSeparatelyLeavesNothingOnError serves a child a stream of its
// own while the cast ends under it: the child's connection, the encoder,
// the pipe and the relay must all be closed again.
func TestAttachSeparatelyLeavesNothingOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dense.img")
	if err := testimage.Write(path, 4<<20, 1, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	cfg := Config{}
	cfg.defaults()
	s := &Server{cfg: cfg, log: cfg.Logger, img: im}
	enc, err := stream.NewEncoder(im, s.cast, cfg.FrameSize, im.Encoding)
	if err != nil {
		t.Fatal(err)
	}
	src := &source{s: s, header: enc.Header()}
	enc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	runtime.GC()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hungUp := make(chan error, 1)
	go func() { // the child
		c, err := ln.Accept()
		if err != nil {
			hungUp <- err
			return
		}
		defer c.Close()
		in, err := stream.AcceptStream(c)
		if err != nil {
			hungUp <- err
			return
		}
		cancel() // the cast ends before the server has its answer
		if err := in.Answer(nil, nil, 1<<20); err != nil {
			hungUp <- err
			return
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		hungUp <- err
	}()
	if err := src.attachSeparately(ctx, &nodeState{name: "pc01", dataAddr: ln.Addr().String()}); err == nil {
		t.Fatal("a child was attached in a cast that had ended")
	}
	if err := <-hungUp; err == nil || isTimeout(err) {
		t.Fatalf("the child's connection is still open: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), openFDs(t)
		if g <= goroutines && f <= fds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines (before: %d), %d open files (before: %d)", g, goroutines, f, fds)
		}
		time.Sleep(20 * time.Millisecond) // nothing to wait on: goroutines wind down
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
