package capacity

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPiecesOverlapThroughTheBuffer: free space that the decoders hold back,
// then files that the link holds back. With a buffer that holds the files'
// stream, the link carries them while the nodes decode the free space; in
// the other order, or with no buffer to speak of, the pieces take their
// time in turn.
func TestPiecesOverlapThroughTheBuffer(t *testing.T) {
	// Each host a machine of its own: the nodes' decoders hold the free
	// space back, and the links run on.
	net := pieceNet(4)
	for i := range net.Hosts {
		net.Hosts[i].Machine = ""
	}
	data := Piece{Share: 0.4, ZeroFraction: 0.02, Factor: 3, Decode: 1}
	zeros := Piece{Share: 0.6, ZeroFraction: 1, Factor: 5000, Decode: 1}
	const image = 1 << 30
	rate := func(pieces []Piece, ahead int64) Result {
		pieces = append([]Piece(nil), pieces...)
		zero, factor := averages(pieces)
		return evaluateWith(t, net, Star(4), Compression{Codec: "zstd", Factor: factor},
			Options{ZeroFraction: zero, Pieces: pieces, ImageBytes: image, AheadBytes: ahead})
	}
	zerosFirst, dataFirst := []Piece{zeros, data}, []Piece{data, zeros}
	inTurn := rate(zerosFirst, 0)
	if got := rate(dataFirst, 0).Rate; !near(got, inTurn.Rate) {
		t.Fatalf("without a buffer the order changed the rate: %v against %v", got, inTurn.Rate)
	}
	// The stages' own times, each over the whole image: the most a
	// buffer can hide.
	var up, down float64
	for _, p := range zerosFirst {
		zero, factor := averages([]Piece{p})
		r := evaluateWith(t, net, Star(4), Compression{Codec: "zstd", Factor: factor}, Options{ZeroFraction: min(zero, 0.999999)})
		c := costOf(p.Share, 1/factor, r.Constraints)
		up += c.up * c.share
		down += c.down * c.share
	}
	overlapped := 1 / max(up, down)
	wire := data.Share * image / data.Factor // the files' stream

	for _, tc := range []struct {
		name   string
		pieces []Piece
		ahead  int64
		want   float64
	}{
		{"zeros first, a buffer for all the files", zerosFirst, int64(2 * wire), overlapped},
		{"zeros first, a buffer of a thousandth", zerosFirst, int64(wire / 1000), inTurn.Rate},
		{"files first, a buffer for all of them", dataFirst, int64(2 * wire), inTurn.Rate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rate(tc.pieces, tc.ahead)
			t.Logf("%.1f MB/s (in turn %.1f, overlapped %.1f)", r.Rate/MB, inTurn.Rate/MB, overlapped/MB)
			if math.Abs(r.Rate-tc.want) > 0.02*tc.want {
				t.Errorf("rate %.4g MB/s, want %.4g", r.Rate/MB, tc.want/MB)
			}
			if got := r.RateOver(0, 1); math.Abs(got-r.Rate) > 1e-9*r.Rate {
				t.Errorf("the stretches make %v over the image, want the rate %v", got, r.Rate)
			}
			if r.Bottleneck != inTurn.Bottleneck {
				t.Errorf("bottleneck %q, want the pieces' in turn %q", r.Bottleneck, inTurn.Bottleneck)
			}
		})
	}
	if inTurn.Rate > 0.9*overlapped {
		t.Fatalf("the pieces in turn %.4g and overlapped %.4g are too close to test", inTurn.Rate, overlapped)
	}

	// On one machine, whose cores the decoders fill, the way in waits for
	// them too: nothing runs ahead.
	box := pieceNet(4)
	zero, factor := averages(append([]Piece(nil), zerosFirst...))
	opt := Options{ZeroFraction: zero, Pieces: zerosFirst, ImageBytes: image}
	comp := Compression{Codec: "zstd", Factor: factor}
	inTurnOnBox := evaluateWith(t, box, Star(4), comp, opt).Rate
	opt.AheadBytes = int64(2 * wire)
	if got := evaluateWith(t, box, Star(4), comp, opt).Rate; !near(got, inTurnOnBox) {
		t.Errorf("on one machine: %.4g MB/s with a buffer, want the pieces in turn %.4g", got/MB, inTurnOnBox/MB)
	}
}

// TestAheadRateBetweenItsBounds: whatever the pieces and the buffer, the
// rate is no lower than the pieces' in turn and no higher than the
// image's averages allow.
func TestAheadRateBetweenItsBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		n := 1 + rng.IntN(8)
		pieces := make([]Piece, n)
		for i := range pieces {
			pieces[i] = Piece{Share: 0.1 + rng.Float64(), ZeroFraction: rng.Float64() * 0.99, Factor: 1.2 + 50*rng.Float64(), Decode: 0.3 + 2*rng.Float64()}
		}
		zero, factor := averages(pieces)
		nodes := 1 + rng.IntN(6)
		tree := []Tree{Chain(nodes), Star(nodes), NaryTree(nodes, 2)}[rng.IntN(3)]
		image := int64(1+rng.IntN(64)) << 26
		for _, comp := range []Compression{{}, {Codec: "zstd", Factor: factor}} {
			opt := Options{ZeroFraction: zero, ImageBytes: image}
			whole := evaluateWith(t, pieceNet(nodes), tree, comp, opt)
			opt.Pieces = pieces
			inTurn := evaluateWith(t, pieceNet(nodes), tree, comp, opt)
			opt.AheadBytes = int64(rng.Float64() * float64(image))
			ahead := evaluateWith(t, pieceNet(nodes), tree, comp, opt)
			if ahead.Rate < inTurn.Rate || ahead.Rate > whole.Rate*(1+1e-9) {
				t.Fatalf("trial %d, %s %s, buffer %d of %d: %.6g, want from the pieces' in turn %.6g to the average's %.6g",
					trial, tree.Name(), comp.Name(), opt.AheadBytes, image, ahead.Rate, inTurn.Rate, whole.Rate)
			}
			if got := ahead.RateOver(0, 1); math.Abs(got-ahead.Rate) > 1e-9*ahead.Rate {
				t.Fatalf("trial %d: the stretches make %v over the image, want the rate %v", trial, got, ahead.Rate)
			}
		}
	}
}
