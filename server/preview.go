package server

import (
	"context"
	"fmt"

	"dolly/capacity"
	"dolly/dolly/probe"
	"dolly/imaging"
)

// Preview ranks every plan for a topology file without casting. With an
// image, its size, zero runs and compressibility replace the file's
// figures: compressed images are scanned (which proves them whole) and raw
// ones sampled.
func Preview(ctx context.Context, topo *capacity.Topology, image string, frameSize int) ([]capacity.Result, error) {
	t := *topo
	if image != "" {
		im, err := imaging.OpenImage(image)
		if err != nil {
			return nil, err
		}
		defer im.Close()
		p, err := probe.Image(ctx, im, nil)
		if err != nil {
			return nil, err
		}
		opt := Options(p, frameSize)
		opt.Startup, opt.MaxFanout, opt.Explicit = t.Options.Startup, t.Options.MaxFanout, t.Options.Explicit
		t.Options = opt
	} else if frameSize > 0 && t.Options.FrameBytes == 0 {
		t.Options.FrameBytes = int64(frameSize)
	}
	results, err := t.Rank()
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", topo.Name, err)
	}
	return results, nil
}
