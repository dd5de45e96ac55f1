package capacity

import "math"

// A dolly node keeps what it has received and not yet written in its
// relay's history, so the stream's way to it (the links, the switches, the
// source's reading) may run ahead of its own work (decoding, checking,
// writing) by as much as the history holds. Where a stretch of the image
// that the nodes' work holds back (free space that a decoder fills)
// comes before one that a link holds back (files), the link carries the
// second while the nodes still work on the first: the two overlap, and the
// cast takes less than their times added up. The other way round nothing
// overlaps: the nodes cannot work on bytes that have not come.
//
// aheadRate models this as a line of two stages with a buffer between
// them, the image cut into slices of an eighth of the buffer: the way in
// receives a slice once the one before is in and the buffer has room for
// it (the slices it would no longer hold are written); the node works on
// it as it comes in, once the slice before is written.

// stageOf says which stage c limits: the stream's way to a node (links,
// switches, the source's own work), which may run ahead of the node's own
// work, or that work: its decoding thread and its disk. Memory, and a
// machine's disk that several hosts share, limit both. A CPU, a host's or a
// machine's that several hosts share (the source and nodes on one box, an
// emulated lab), is a pool of its own (pooled): it runs the relays, the
// source and the kernel's networking as well as the decoders, so it limits
// the way in by its work for it, and the cast by all its work.
func stageOf(c Constraint) (up, down bool) {
	switch {
	case c.Kind == LinkLimit || c.Kind == BackplaneLimit || c.Kind == SourceRateLimit:
		return true, false
	case c.Kind == MachineMemoryLimit || c.Kind == MachineDiskLimit:
		return true, true
	case c.Flow.Source: // the source's own limits: reading, compressing, sending
		return true, false
	case c.Kind == DecompressLimit || c.Kind == DiskLimit:
		return false, true
	}
	return true, true
}

// pooled says whether c is a CPU whose cores serve both stages.
func pooled(c Constraint) bool {
	return c.Kind == CPULimit || c.Kind == MachineCPULimit
}

// pieceCost is what one piece of the image costs each stage, in seconds
// per raw byte, and its stream bytes per raw byte.
type pieceCost struct {
	share    float64 // of the raw image
	wire     float64
	up, down float64
	// pools is what each CPU (by constraint) spends, in seconds of all
	// its cores per raw byte.
	pools map[poolKey]float64
}

// poolKey tells one CPU from another.
type poolKey struct {
	kind    ConstraintKind
	subject string
}

// costOf splits a piece's constraints into its two stages' times.
func costOf(share, wire float64, cs []Constraint) pieceCost {
	p := pieceCost{share: share, wire: wire}
	for _, c := range cs {
		b := c.Bound()
		if math.IsInf(b, 1) {
			continue
		}
		if pooled(c) {
			if p.pools == nil {
				p.pools = map[poolKey]float64{}
			}
			p.pools[poolKey{c.Kind, c.Subject}] += 1 / b
			if wayIn := c.Coef - c.Down; wayIn > 0 { // its work for the way in
				p.up = max(p.up, wayIn/c.Cap)
			}
			continue
		}
		up, down := stageOf(c)
		if up {
			p.up = max(p.up, 1/b)
		}
		if down {
			p.down = max(p.down, 1/b)
		}
	}
	return p
}

// sliceFraction is a slice's most stream bytes against the buffer, and
// maxSlices bounds the slices of one image: past that, its pieces are so
// much larger than the buffer that they barely overlap.
const (
	sliceFraction = 8
	maxSlices     = 4096
)

// aheadRate is the rate over the pieces, in order, when the way in may run
// ahead of the nodes' work by ahead stream bytes, for an image of
// imageBytes raw bytes; with the stretches' rates as the nodes write them.
// ok is false when the pieces are too large against the buffer to tell
// (see maxSlices).
func aheadRate(pieces []pieceCost, imageBytes, ahead float64) (rate float64, stretches []Stretch, ok bool) {
	sliceWire := ahead / sliceFraction
	type slice struct {
		wire, up, down float64
		pools          []float64 // by index of keys
	}
	index := map[poolKey]int{}
	for _, p := range pieces {
		for k := range p.pools {
			if _, ok := index[k]; !ok {
				index[k] = len(index)
			}
		}
	}
	var cut []slice
	ends := make([]int, len(pieces)) // each piece's last slice + 1
	for i, p := range pieces {
		raw := p.share * imageBytes
		n := math.Ceil(raw * p.wire / sliceWire)
		if float64(len(cut))+n > maxSlices {
			return 0, nil, false
		}
		k := max(1, int(n))
		r := raw / float64(k)
		pools := make([]float64, len(index))
		for key, c := range p.pools {
			pools[index[key]] = r * c
		}
		for range k {
			cut = append(cut, slice{wire: r * p.wire, up: r * p.up, down: r * p.down, pools: pools})
		}
		ends[i] = len(cut)
	}
	// in[j] is when slice j is in, written[j] when the node has written it;
	// done[k] when CPU k has done its work on the slices so far.
	in, written := make([]float64, len(cut)), make([]float64, len(cut))
	done := make([]float64, len(index))
	var held float64 // stream bytes of slices first..j
	first := 0       // the oldest slice the buffer must still hold
	for j, s := range cut {
		held += s.wire
		for first < j && held > ahead {
			held -= cut[first].wire
			first++
		}
		var prevIn, prevWritten, room float64
		if j > 0 {
			prevIn, prevWritten = in[j-1], written[j-1]
		}
		if first > 0 {
			room = written[first-1]
		}
		// As a fluid: the node works on a slice as it comes in, so it
		// is written once the node has done its work on it and once
		// the last of it is in, whichever is later.
		in[j] = max(prevIn, room) + s.up
		written[j] = max(prevWritten+s.down, in[j])
		// A CPU works on the slices in turn, at most as fast as they
		// come in; what its cores do for one stage they cannot do for
		// the other.
		for k, c := range s.pools {
			done[k] = max(done[k]+c, in[j])
			written[j] = max(written[j], done[k])
		}
	}
	total := written[len(cut)-1]
	if !(total > 0) {
		return math.Inf(1), nil, true
	}
	stretches = make([]Stretch, len(pieces))
	var from float64
	for i, p := range pieces {
		to := written[ends[i]-1]
		stretches[i] = Stretch{Share: p.share, Rate: math.Inf(1)}
		if to > from {
			stretches[i].Rate = p.share * imageBytes / (to - from)
		}
		from = to
	}
	return imageBytes / total, stretches, true
}
