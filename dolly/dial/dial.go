// Package dial connects to a peer that may not be listening yet: a node
// booting before the server, or a child whose listener is coming up.
package dial

import (
	"context"
	"net"
	"time"
)

// Backoff dials addr over TCP until it answers or ctx ends, waiting first
// between tries and doubling the wait up to most. retrying, if set, is
// told of each failed try (attempt counts from 0) before the wait.
func Backoff(ctx context.Context, addr string, first, most time.Duration, retrying func(attempt int, err error)) (net.Conn, error) {
	var d net.Dialer
	wait := first
	for attempt := 0; ; attempt++ {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if retrying != nil {
			retrying(attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		wait = min(wait*2, most)
	}
}

// Data connects to a node's data listener, retrying until deadline.
func Data(ctx context.Context, addr string, deadline time.Time) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return Backoff(ctx, addr, 50*time.Millisecond, time.Second, nil)
}
