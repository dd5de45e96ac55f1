package server

import (
	"context"
	"time"
)

// pacer holds a sender to an average rate: after each send it sleeps until
// the bytes sent so far are due at that rate. It shapes at the application
// level, so a cast can share a network politely.
type pacer struct {
	rate  float64 // bytes per second; 0 means no limit
	start time.Time
	sent  float64
}

func newPacer(rate float64) *pacer { return &pacer{rate: rate, start: time.Now()} }

func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 {
		return nil
	}
	p.sent += float64(n)
	due := p.start.Add(time.Duration(p.sent / p.rate * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
