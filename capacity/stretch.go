package capacity

import "math"

// Stretch is the predicted rate of one stretch of the image, a piece of it
// as profiled (Options.Pieces).
type Stretch struct {
	Share float64 // of the raw image
	Rate  float64 // raw image bytes per second; +Inf when it costs no time
}

// RateOver is the predicted rate while the cast moves from one point of
// the image to another, both given as shares of the raw image (0 to 1).
// An image is seldom uniform: a filesystem's files run at the rate of a
// link, its free space far faster, so a cast judged against its average
// looks slow in every stretch of files. Without stretches, or for an empty
// span, it is the plan's rate.
func (r Result) RateOver(from, to float64) float64 {
	from, to = max(from, 0), min(to, 1)
	if len(r.Stretches) == 0 || !(to > from) {
		return r.Rate
	}
	var spent, at float64
	for _, s := range r.Stretches {
		lo, hi := max(from, at), min(to, at+s.Share)
		at += s.Share
		if hi <= lo || math.IsInf(s.Rate, 1) {
			continue
		}
		if !(s.Rate > 0) {
			return 0
		}
		spent += (hi - lo) / s.Rate
	}
	if spent == 0 {
		return math.Inf(1)
	}
	return (to - from) / spent
}

// Scaled returns r with its rate and those of its stretches times f: the
// prediction a cast that runs at f of it is then held to. Stretches that
// cost nothing stay so.
func (r Result) Scaled(f float64) Result {
	r.Rate *= f
	r.Stretches = append([]Stretch(nil), r.Stretches...)
	for i := range r.Stretches {
		if !math.IsInf(r.Stretches[i].Rate, 1) {
			r.Stretches[i].Rate *= f
		}
	}
	return r
}
