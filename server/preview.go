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
// ones sampled. The notes say which nodes a cast would serve apart (see
// serveApart). A raw image is read through its block map, as a cast reads
// it, unless allBlocks.
func Preview(ctx context.Context, topo *capacity.Topology, image string, frameSize int, allBlocks bool) ([]capacity.Result, []string, error) {
	t := *topo
	var notes []string
	if image != "" {
		im, err := imaging.OpenImage(image)
		if err != nil {
			return nil, nil, err
		}
		defer im.Close()
		note, err := mapImage(im, allBlocks)
		if err != nil {
			return nil, nil, err
		}
		if note != "" {
			notes = append(notes, note)
		}
		p, err := probe.Image(ctx, im, nil)
		if err != nil {
			return nil, nil, err
		}
		opt := Options(p, frameSize)
		opt.Startup, opt.MaxFanout, opt.Explicit = t.Options.Startup, t.Options.MaxFanout, t.Options.Explicit
		t.Options = opt
	} else if frameSize > 0 && t.Options.FrameBytes == 0 {
		t.Options.FrameBytes = int64(frameSize)
	}
	results, err := t.Rank()
	if err != nil {
		return nil, nil, fmt.Errorf("topology %s: %w", topo.Name, err)
	}
	return results, append(notes, apartNotes(t)...), nil
}

// apartNotes says which nodes of t a cast would serve apart, and how.
func apartNotes(t capacity.Topology) []string {
	choose := func(net capacity.Network, compress Compress) (Choice, error) {
		return Choose(net, t.Options, "", 0, compress, imaging.Raw)
	}
	ch, err := choose(t.Network, CompressAuto)
	if err != nil || !ch.Modeled {
		return nil
	}
	ch = serveApart(t.Network, t.Options, ch, choose)
	if len(ch.Apart) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("in a cast (%s): %s", planName(ch.Result), ch.Notes[len(ch.Notes)-1])}
}
