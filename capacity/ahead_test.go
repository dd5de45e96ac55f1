package capacity

import (
	"math"
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
	// Each piece's time in each stage, per byte of the image.
	stage := func(p Piece) pieceCost {
		zero, factor := averages([]Piece{p})
		r := evaluateWith(t, net, Star(4), Compression{Codec: "zstd", Factor: factor}, Options{ZeroFraction: min(zero, 0.999999)})
		c := costOf(p.Share, 1/factor, r.Constraints)
		c.up, c.down = c.up*c.share, c.down*c.share
		return c
	}
	z, f := stage(zeros), stage(data)
	// The stages' own times over the whole image: the most a buffer can
	// hide.
	overlapped := 1 / max(z.up+f.up, z.down+f.down)
	wire := data.Share * image / data.Factor // the files' stream
	// A buffer of a fortieth of the files: the link brings that much of
	// them while the nodes decode the free space, then waits for them, and
	// carries the rest after.
	const small = 40
	if z.up+f.up/small >= z.down {
		t.Fatalf("the link brings a fortieth of the files before the free space is decoded: nothing to wait for")
	}
	partly := 1 / (z.down + (1-1.0/small)*f.up)

	for _, tc := range []struct {
		name   string
		pieces []Piece
		ahead  int64
		want   float64
	}{
		{"zeros first, a buffer for all the files", zerosFirst, int64(2 * wire), overlapped},
		{"zeros first, a buffer of a fortieth of the files", zerosFirst, int64(wire / small), partly},
		{"files first, a buffer for all of them", dataFirst, int64(2 * wire), inTurn.Rate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rate(tc.pieces, tc.ahead)
			t.Logf("%.2f MB/s (in turn %.2f, overlapped %.2f)", r.Rate/MB, inTurn.Rate/MB, overlapped/MB)
			if math.Abs(r.Rate-tc.want) > 0.008*tc.want {
				t.Errorf("rate %.4g MB/s, want %.4g", r.Rate/MB, tc.want/MB)
			}
			if got := r.RateOver(0, 1); math.Abs(got-r.Rate) > 1e-9*r.Rate {
				t.Errorf("the stretches make %v over the image, want the rate %v", got, r.Rate)
			}
		})
	}
	if partly < 1.015*inTurn.Rate {
		t.Fatalf("a fortieth's %.4g is too close to the pieces in turn %.4g to test", partly, inTurn.Rate)
	}
	if inTurn.Rate > 0.95*overlapped {
		t.Fatalf("the pieces in turn %.4g and overlapped %.4g are too close to test", inTurn.Rate, overlapped)
	}

	// On one machine the cores serve the decoders and the way in alike:
	// with a buffer the link carries the files while the decoders fill
	// the free space, and the cast takes what the cores' whole work
	// takes, or the stages', whichever is longer.
	box := pieceNet(4)
	zero, factor := averages(append([]Piece(nil), zerosFirst...))
	opt := Options{ZeroFraction: zero, Pieces: zerosFirst, ImageBytes: image}
	comp := Compression{Codec: "zstd", Factor: factor}
	inTurnOnBox := evaluateWith(t, box, Star(4), comp, opt).Rate
	onBox := func(p Piece) pieceCost {
		zero, factor := averages([]Piece{p})
		r := evaluateWith(t, box, Star(4), Compression{Codec: "zstd", Factor: factor}, Options{ZeroFraction: min(zero, 0.999999)})
		return costOf(p.Share, 1/factor, r.Constraints)
	}
	bz, bf := onBox(zeros), onBox(data)
	var cores float64 // the box's CPU, all its work over the image
	for k, c := range bz.pools {
		if k.kind == MachineCPULimit {
			cores = bz.share*c + bf.share*bf.pools[k]
		}
	}
	if cores == 0 {
		t.Fatal("no CPU of the box among the pieces' costs")
	}
	want := 1 / max(cores, bz.share*bz.up+bf.share*bf.up, bz.share*bz.down+bf.share*bf.down)
	if want < 1.05*inTurnOnBox {
		t.Fatalf("overlapped on the box %.4g is too close to the pieces in turn %.4g to test", want/MB, inTurnOnBox/MB)
	}
	opt.AheadBytes = int64(2 * wire)
	if got := evaluateWith(t, box, Star(4), comp, opt).Rate; math.Abs(got-want) > 0.008*want {
		t.Errorf("on one machine: %.4g MB/s with a buffer, want %.4g (in turn %.4g)", got/MB, want/MB, inTurnOnBox/MB)
	}
}
