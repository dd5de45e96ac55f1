package listen

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first accepts as a machine out of descriptors
// does, then hands out real connections.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

func TestServeOutlivesTooManyOpenFiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.failures.Store(5)
	got := make(chan net.Conn, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(t.Context(), fl, slog.New(slog.DiscardHandler), func(c net.Conn) { got <- c })
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case s := <-got:
		s.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no connection taken after five EMFILE errors")
	}
	ln.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return once its listener closed")
	}
}

func TestServeEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	fl := &flakyListener{}
	fl.failures.Store(1 << 30) // every accept fails
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(ctx, fl, slog.New(slog.DiscardHandler), func(net.Conn) { t.Error("a connection out of nowhere") })
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return once its context ended")
	}
}
