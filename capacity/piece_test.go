package capacity

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// pieceNet is a star whose source link and nodes' CPU are of a size: a
// stretch of data is held back by the link, a stretch of zeros by the
// decoders.
func pieceNet(nodes int) Network {
	res := Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{
		Net: 2000 * MB, Copy: 4000 * MB, Digest: 4000 * MB,
		Decompress: map[string]float64{"zstd": 1000 * MB},
	}}
	net := oneSwitch(nodes, 125*MB, res)
	for i := range net.Hosts {
		net.Hosts[i].Machine = "box"
	}
	return net
}

// averages are the image-wide figures of pieces: their zero share,
// compression factor (raw over compressed bytes) and the decoding weights
// scaled to average 1, as a profile gives them.
func averages(pieces []Piece) (zero, factor float64) {
	var share, packed, decode float64
	for _, p := range pieces {
		share += p.Share
		zero += p.Share * p.ZeroFraction
		packed += p.Share / p.Factor
		decode += p.Share * p.Decode
	}
	for i := range pieces {
		pieces[i].Decode *= share / decode
	}
	return zero / share, share / packed
}

func TestPiecesTakeTheirTimeInTurn(t *testing.T) {
	net := pieceNet(4)
	data := Piece{Share: 0.4, ZeroFraction: 0.02, Factor: 3, Decode: 1}
	zeros := Piece{Share: 0.6, ZeroFraction: 1, Factor: 5000, Decode: 1}
	pieces := []Piece{data, zeros}
	zero, factor := averages(pieces)
	comp := Compression{Codec: "zstd", Factor: factor}

	whole := evaluateWith(t, net, Star(4), comp, Options{ZeroFraction: zero})
	split := evaluateWith(t, net, Star(4), comp, Options{ZeroFraction: zero, Pieces: pieces})

	// Each piece alone, as a uniform image of its make-up.
	alone := func(p Piece) float64 {
		return evaluateWith(t, net, Star(4), Compression{Codec: "zstd", Factor: p.Factor}, Options{ZeroFraction: min(p.ZeroFraction, 0.999999)}).Rate
	}
	rData, rZeros := alone(data), alone(zeros)
	want := 1 / (data.Share/rData + zeros.Share/rZeros)
	t.Logf("averages %.4g MB/s, pieces %.4g (data alone %.4g, zeros alone %.4g): %s", whole.Rate/MB, split.Rate/MB, rData/MB, rZeros/MB, split.Bottleneck)
	if math.Abs(split.Rate-want) > 1e-3*want {
		t.Errorf("rate over pieces = %.4g, want the pieces' times added up: %.4g", split.Rate, want)
	}
	if split.Rate >= 0.95*whole.Rate {
		t.Errorf("rate over pieces %.4g is not clearly below the averages' %.4g: the stretches should not overlap", split.Rate, whole.Rate)
	}
	for _, words := range []string{"74% of the time: link src→sw", "26%: CPU of machine box"} {
		if !strings.Contains(split.Bottleneck, words) {
			t.Errorf("bottleneck %q does not name %q", split.Bottleneck, words)
		}
	}
	if split.Binding[0].Kind != LinkLimit {
		t.Errorf("binding %v: want the link, which takes most of the time", split.Binding)
	}
	// The constraints stay the image's averages, for callers that fit to them.
	if got, want := find(t, split, LinkLimit, "src→sw").Coef, find(t, whole, LinkLimit, "src→sw").Coef; !near(got, want) {
		t.Errorf("link coefficient with pieces %v, want the average's %v", got, want)
	}
}

func TestPiecesNeverFasterThanTheirAverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(6)
		pieces := make([]Piece, n)
		for i := range pieces {
			pieces[i] = Piece{Share: 0.1 + rng.Float64(), ZeroFraction: rng.Float64() * 0.9, Factor: 1.2 + 20*rng.Float64(), Decode: 0.5 + rng.Float64()}
		}
		zero, factor := averages(pieces)
		nodes := 1 + rng.IntN(6)
		tree := []Tree{Chain(nodes), Star(nodes), NaryTree(nodes, 2)}[rng.IntN(3)]
		for _, comp := range []Compression{{}, {Codec: "zstd", Factor: factor}} {
			opt := Options{ZeroFraction: zero}
			whole := evaluateWith(t, pieceNet(nodes), tree, comp, opt)
			opt.Pieces = pieces
			split := evaluateWith(t, pieceNet(nodes), tree, comp, opt)
			if split.Rate > whole.Rate*(1+1e-9) {
				t.Fatalf("trial %d, %s %s: pieces give %.6g, above their average's %.6g", trial, tree.Name(), comp.Name(), split.Rate, whole.Rate)
			}
			// Nor with a buffer that lets them overlap (aheadRate), whose
			// stretches make up its rate.
			ahead := opt
			ahead.ImageBytes = int64(1+rng.IntN(64)) << 26
			ahead.AheadBytes = int64(rng.Float64() * float64(ahead.ImageBytes))
			r := evaluateWith(t, pieceNet(nodes), tree, comp, ahead)
			if r.Rate > whole.Rate*(1+1e-9) {
				t.Fatalf("trial %d, %s %s, buffer %d of %d: %.6g, above the average's %.6g", trial, tree.Name(), comp.Name(), ahead.AheadBytes, ahead.ImageBytes, r.Rate, whole.Rate)
			}
			if got := r.RateOver(0, 1); math.Abs(got-r.Rate) > 1e-9*r.Rate {
				t.Fatalf("trial %d: the stretches make %v over the image, want the rate %v", trial, got, r.Rate)
			}
			// Pieces all alike are the average.
			same := make([]Piece, n)
			for i := range same {
				same[i] = Piece{Share: pieces[i].Share, ZeroFraction: zero, Factor: factor, Decode: 1}
			}
			opt.Pieces = same
			if got := evaluateWith(t, pieceNet(nodes), tree, comp, opt).Rate; math.Abs(got-whole.Rate) > 1e-9*whole.Rate {
				t.Fatalf("trial %d: like pieces give %.9g, want the average's %.9g", trial, got, whole.Rate)
			}
		}
	}
}

func TestPiecesChecked(t *testing.T) {
	net := pieceNet(2)
	for _, tc := range []struct {
		piece Piece
		want  string
	}{
		{Piece{Share: 0, Factor: 2}, "share 0"},
		{Piece{Share: 1, Factor: 0}, "compression factor 0"},
		{Piece{Share: 1, Factor: 2, ZeroFraction: 1.5}, "zero fraction 1.5"},
		{Piece{Share: 1, Factor: 2, Decode: -1}, "decoding cost -1"},
		{Piece{Share: math.NaN(), Factor: 2}, "share NaN"},
	} {
		_, err := Evaluate(net, Plan{Tree: Chain(2), Hosts: hostNames(net), Compression: Compression{Codec: "zstd", Factor: 2}},
			Options{Pieces: []Piece{{Share: 1, Factor: 2}, tc.piece}})
		if err == nil || !strings.Contains(err.Error(), "image piece 2: "+tc.want) {
			t.Errorf("piece %+v: error %v, want %q", tc.piece, err, tc.want)
		}
	}
}
