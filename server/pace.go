package server

import (
	"context"

	"golang.org/x/time/rate"
)

// pacer holds the source to a rate (-max-rate), so that a cast can share a
// network politely. It is a token bucket whose burst is paceBurst of
// sending at that rate: after a stall (a slow child, a rewiring) the source
// goes on at the rate, instead of making up the lost time at line rate.
type pacer struct {
	lim *rate.Limiter // nil: no limit
}

// paceBurst is how much sending at the rate the bucket holds: enough that
// the source sends whole frames, small enough that a burst is over before
// a switch's buffers fill.
const paceBurst = 0.05 // seconds

// minBurst is the least burst in bytes, for very low rates.
const minBurst = 64 << 10

func newPacer(bytesPerSec float64) *pacer {
	if bytesPerSec <= 0 {
		return &pacer{}
	}
	burst := max(int(bytesPerSec*paceBurst), minBurst)
	return &pacer{lim: rate.NewLimiter(rate.Limit(bytesPerSec), burst)}
}

// wait takes n bytes from the bucket, waiting as long as the rate needs;
// more than a burst is taken a burst at a time.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.lim == nil {
		return nil
	}
	for n > 0 {
		k := min(n, p.lim.Burst())
		if err := p.lim.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
