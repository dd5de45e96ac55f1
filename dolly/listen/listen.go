// Package listen runs accept loops that outlive a busy machine.
package listen

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"
)

// Serve accepts connections on ln and hands each to handle, which must
// not block (it starts the connection's own goroutine), until ln is closed
// or ctx is done. Any other error accepting (too many open files, a
// connection aborted before it was taken) is waited out with a pause that
// grows from 5 ms to a second, as a busy server should: one EMFILE must
// not end the loop for good.
func Serve(ctx context.Context, ln net.Listener, log *slog.Logger, handle func(net.Conn)) {
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err == nil {
			pause = 0
			handle(c)
			continue
		}
		if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			return
		}
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		log.Warn("accepting a connection; trying again", "err", err, "pause", pause)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}
