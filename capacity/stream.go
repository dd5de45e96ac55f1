package capacity

import (
	"fmt"
	"math"
)

// stream is what one plan sends, as the link and host models count it.
type stream struct {
	Compression         // the form on the wire
	zero        float64 // share of the raw image in zero runs, which are not sent
	zeroed      float64 // share of it in zero runs the nodes zero (at most zero)
	holes       float64 // share of it the source's file keeps as holes, not read
	undecoded   float64 // share of it a stored image's zstd decoder hands on undecoded
	whole       float64 // share of it in a stored zstd image's frames decoded whole
	// stored is how the source holds the image; nil means as it is sent.
	stored *Compression
	// piece, when set, is the stretch of the image being counted: its own
	// zero runs, compressibility and decoding cost replace the image's.
	piece *Piece
}

// factor is the raw bytes per compressed byte of what is counted.
func (s stream) factor() float64 {
	if s.piece != nil {
		return s.piece.Factor
	}
	return s.Factor
}

// wire returns the bytes on the wire per raw byte: 1/c for a compressed
// stream, the non-zero share for a raw one (zero runs travel as a few
// header bytes).
func (s stream) wire() float64 {
	if s.Enabled() {
		return 1 / s.factor()
	}
	return s.data()
}

// data is the share of the raw image that is data rather than zero runs:
// what a node copies and writes.
func (s stream) data() float64 {
	if s.piece != nil {
		return 1 - s.piece.ZeroFraction
	}
	return 1 - s.zero
}

// zeroedShare is the share of what is counted in zero runs that a node
// zeroes on its target; a piece is taken to hold its zero runs' share of
// them.
func (s stream) zeroedShare() float64 {
	if s.piece == nil {
		return s.zeroed
	}
	if s.zero <= 0 {
		return 0
	}
	return s.piece.ZeroFraction * s.zeroed / s.zero
}

// unreadHoles is the share of what is counted that a raw image's file
// keeps as holes, which the source sends as zero runs without reading.
// Holes are zero runs; a piece is taken to hold its zero runs' share of
// them.
func (s stream) unreadHoles() float64 {
	if s.holes <= 0 || s.zero <= 0 {
		return 0
	}
	if s.piece == nil {
		return s.holes
	}
	return s.piece.ZeroFraction * s.holes / s.zero
}

// scanned is the share of what is counted that comes out of a zstd
// decoder as bytes, which the node scans for zero runs: all but the zeros
// it hands on undecoded, the zero runs of a stream compressed on the fly
// (its zero frames) or the undecoded share of an image sent as stored. A
// piece is taken to hold its zero runs' share of the latter.
func (s stream) scanned() float64 {
	if s.stored != nil && s.stored.Codec != s.Codec {
		return s.data()
	}
	if s.piece == nil || s.zero <= 0 {
		return 1 - s.undecoded
	}
	return 1 - s.piece.ZeroFraction*s.undecoded/s.zero
}

// alignedCopies is the share of what is counted that a node writing with
// O_DIRECT copies into its target's aligned chunks: its data, less what
// it decodes a zstd frame at a time, whole, into the buffers the target
// writes from (imaging.BufferLender). A stream compressed on the fly is
// made of such frames, of a chunk or less; a stored image sent as stored,
// of its frames that small (Options.WholeFraction).
func (s stream) alignedCopies() float64 {
	if s.Codec != "zstd" {
		return s.data()
	}
	switch s.conversion() {
	case "compress":
		return 0
	case "":
		if s.zero < 1 {
			return s.data() * (1 - min(1, s.whole/(1-s.zero)))
		}
	}
	return s.data()
}

// storedBytes is the stored bytes per raw byte of an image held compressed.
func (s stream) storedBytes() float64 {
	if s.piece != nil {
		return 1 / s.piece.Factor
	}
	return 1 / s.stored.Factor
}

// decodeWeight is the decoding cost per raw byte of what is counted,
// against the image's average.
func (s stream) decodeWeight() float64 {
	if s.piece != nil && s.piece.Decode > 0 {
		return s.piece.Decode
	}
	return 1
}

// Piece is a stretch of the image, in order. Images are seldom uniform: a
// filesystem holds its files first and its free space (zero runs) after,
// and its files compress unevenly. Where a link sets the pace of one
// stretch and the CPU that of the next, the cast takes each stretch's time
// in turn, longer than the image's averages suggest: the nodes cannot
// decode a stretch before it has arrived.
type Piece struct {
	Share        float64 `json:"share"`         // of the raw image
	ZeroFraction float64 `json:"zero_fraction"` // of the piece, in zero runs
	// Factor is the piece's raw bytes per compressed byte, for a
	// compressed stream (and a compressed stored image).
	Factor float64 `json:"factor"`
	// Decode is the piece's decoding cost per raw byte against the image's
	// average; 0 counts it as 1.
	Decode float64 `json:"decode,omitempty"`
}

func (p Piece) check() error {
	switch {
	case !(p.Share > 0) || math.IsInf(p.Share, 0):
		return fmt.Errorf("share %v: want a positive share", p.Share)
	case !(p.ZeroFraction >= 0 && p.ZeroFraction <= 1):
		return fmt.Errorf("zero fraction %v: want a share from 0 to 1", p.ZeroFraction)
	case !(p.Factor > 0) || math.IsInf(p.Factor, 0):
		return fmt.Errorf("compression factor %v: want a finite factor above 0", p.Factor)
	case !(p.Decode >= 0) || math.IsInf(p.Decode, 0):
		return fmt.Errorf("decoding cost %v: want a finite cost from 0", p.Decode)
	}
	return nil
}

// conversion tells what the source does to turn the stored image into the
// stream: "compress", "decompress" or nothing.
func (s stream) conversion() string {
	switch {
	case s.stored == nil || s.stored.Enabled() == s.Enabled():
		return ""
	case s.Enabled():
		return "compress"
	default:
		return "decompress"
	}
}
