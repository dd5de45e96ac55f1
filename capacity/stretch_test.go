package capacity

import (
	"math"
	"testing"
)

func TestRateOver(t *testing.T) {
	// Files at a link's 10 over the first half, free space at 90 after.
	r := Result{Rate: 18, Stretches: []Stretch{{Share: 0.5, Rate: 10}, {Share: 0.5, Rate: 90}}}
	tests := []struct {
		name     string
		r        Result
		from, to float64
		want     float64
	}{
		{"whole image: the plan's rate", r, 0, 1, 18},
		{"inside the files", r, 0.1, 0.3, 10},
		{"inside the free space", r, 0.6, 0.9, 90},
		{"across the edge", r, 0.4, 0.6, 0.2 / (0.1/10 + 0.1/90)},
		{"clipped to the image", r, -0.5, 0.25, 10},
		{"empty span: the plan's rate", r, 0.5, 0.5, 18},
		{"no stretches: the plan's rate", Result{Rate: 7}, 0.1, 0.2, 7},
		{"a stretch that costs nothing", Result{Rate: 5, Stretches: []Stretch{{Share: 0.5, Rate: 2.5}, {Share: 0.5, Rate: math.Inf(1)}}}, 0.25, 0.75, 0.5 / (0.25 / 2.5)},
		{"only what costs nothing", Result{Rate: 5, Stretches: []Stretch{{Share: 0.5, Rate: 2.5}, {Share: 0.5, Rate: math.Inf(1)}}}, 0.6, 0.9, math.Inf(1)},
		{"scaled", r.Scaled(0.5), 0.1, 0.3, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.RateOver(tt.from, tt.to)
			if math.IsInf(tt.want, 1) != math.IsInf(got, 1) || !math.IsInf(got, 1) && math.Abs(got-tt.want) > 1e-9*tt.want {
				t.Errorf("RateOver(%v, %v) = %v, want %v", tt.from, tt.to, got, tt.want)
			}
		})
	}
	if r.Scaled(2); r.Stretches[0].Rate != 10 {
		t.Errorf("Scaled changed the result it was called on: %v", r.Stretches)
	}
}

// TestStretchesAddUpToTheRate holds the stretches Evaluate reports to the
// rate it predicts for the whole image.
func TestStretchesAddUpToTheRate(t *testing.T) {
	net := oneSwitch(2, 12.5e6, Resources{Model: ModelBasic, Disk: 100e6})
	opt := Options{ImageBytes: 1 << 30, Pieces: []Piece{{Share: 1, ZeroFraction: 0.1, Factor: 2}, {Share: 3, ZeroFraction: 0.95, Factor: 20}}}
	r, err := Evaluate(net, Plan{Tree: Chain(2), Hosts: hostNames(net)}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stretches) != 2 || r.Stretches[0].Share != 0.25 {
		t.Fatalf("stretches %+v, want two, the first a quarter of the image", r.Stretches)
	}
	if got := r.RateOver(0, 1); math.Abs(got-r.Rate) > 1e-9*r.Rate {
		t.Errorf("RateOver the whole image %v, want the plan's rate %v", got, r.Rate)
	}
	if files, free := r.RateOver(0, 0.25), r.RateOver(0.25, 1); !(files < r.Rate && r.Rate < free) {
		t.Errorf("files at %v, free space at %v: want the files slower than the image's %v and the free space faster", files, free, r.Rate)
	}
}
