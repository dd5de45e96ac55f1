package probe

import (
	"context"
	"time"
)

// probeFeed measures what a TCP stream and the source's data path cost the
// CPU, as the rates one core reaches (see streamCost, feedCost): the feed
// less the far end's receive, one half of a stream.
func probeFeed(ctx context.Context, buf, history []byte, copyRate float64, budget time.Duration, note func(string, ...any)) (stream, feed float64) {
	stream, _ = probeStreams(ctx, buf, history, copyRate, budget, false, note)
	if stream <= 0 {
		note("source path cost: not measured without a stream's")
		return 0, 0
	}
	fed, err := feedCost(ctx, buf, history, budget)
	if err != nil {
		note("source path cost: %v", err)
		return stream, 0
	}
	if path := fed - 1/stream; path > 0 {
		feed = 1 / path
	} else {
		note("source path cost: no more than a stream's, measured with noise")
	}
	return stream, feed
}
