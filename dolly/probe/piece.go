package probe

import "time"

// Piece is a stretch of an image, in order, as Profile found it. Images are
// seldom uniform: a filesystem's files lie before its free space, and they
// compress unevenly. The planner counts each stretch's time in turn.
type Piece struct {
	Size         int64   // raw bytes of the image in the stretch
	ZeroFraction float64 // share of it in zero runs
	Factor       float64 // raw bytes per compressed byte (the profile's Codec)
	DecodeRate   float64 // raw bytes one core decodes per second; 0 if not timed
}

// maxPieces is how many stretches a profile tells apart: enough to find
// where the files end and the free space starts, few enough that each holds
// more than the few megabytes a node buffers (which smooth out finer
// changes).
const maxPieces = 16

// tallyPart is what was measured of one stretch: raw is the bytes read of
// it (all of it when scanned; when sampled, the figures are what its
// sample stands for, as if it had been read whole: sample.stands).
type tallyPart struct {
	size, raw, zero, packed int64
	cpu                     time.Duration
	// solid is what was read of it in reads all of zero runs (a scan's):
	// where the zeros a node's decoder hands on unfilled lie.
	solid int64
}

// pieceTally adds up stretches of span raw bytes as an image is read.
type pieceTally struct {
	span  int64
	parts []tallyPart
}

// add counts raw bytes read at off, of which zero in zero runs, that took
// packed compressed bytes and cpu to decode.
func (t *pieceTally) add(off, raw, zero, packed int64, cpu time.Duration) {
	i := int(off / t.span)
	for len(t.parts) <= i {
		t.parts = append(t.parts, tallyPart{})
	}
	p := &t.parts[i]
	p.size += raw
	p.raw += raw
	p.zero += zero
	p.packed += packed
	p.cpu += cpu
	if zero == raw {
		p.solid += raw
	}
}

// discountSkipped takes out of the parts' decoding times the filling of
// skipped bytes of RLE zeros, which a node's decoder hands on unfilled
// (imaging.ZstdCounts.Skipped) but a scan, which checks the checksums,
// fills at fill seconds a byte. The skipped zeros are shared out among the
// parts by their reads all of zero runs: the zeros deep in a long run.
func (t *pieceTally) discountSkipped(skipped int64, fill float64) {
	var solid int64
	for _, p := range t.parts {
		solid += p.solid
	}
	if skipped <= 0 || solid <= 0 || !(fill > 0) {
		return
	}
	for i := range t.parts {
		p := &t.parts[i]
		share := min(float64(p.solid), float64(p.solid)*float64(skipped)/float64(solid))
		// Never below what the part's other reads took: a fill figure
		// timed apart may be a little off.
		p.cpu = max(p.cpu-time.Duration(share*fill*float64(time.Second)), p.cpu/10)
	}
}

// pieces merges the parts, in order, into at most maxPieces pieces of about
// as many parts each.
func mergePieces(parts []tallyPart) []Piece {
	if len(parts) == 0 {
		return nil
	}
	per := (len(parts) + maxPieces - 1) / maxPieces
	var pieces []Piece
	for i := 0; i < len(parts); i += per {
		var sum tallyPart
		for _, p := range parts[i:min(i+per, len(parts))] {
			sum.size += p.size
			sum.raw += p.raw
			sum.zero += p.zero
			sum.packed += p.packed
			sum.cpu += p.cpu
		}
		if sum.size == 0 || sum.raw == 0 {
			continue
		}
		pc := Piece{
			Size:         sum.size,
			ZeroFraction: float64(sum.zero) / float64(sum.raw),
			Factor:       float64(sum.raw) / float64(max(sum.packed, 1)),
		}
		if sum.cpu > 0 {
			pc.DecodeRate = float64(sum.raw) / sum.cpu.Seconds()
		}
		pieces = append(pieces, pc)
	}
	return pieces
}
