package main

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"syscall"
	"time"
)

// repeatUnder is the length below which a dolly run is cast several times
// and the median kept: the machine's spare CPU changes from minute to
// minute (other guests of its host take some of it), and a short cast that
// keeps the cores busy feels that; longer casts average it out. Casts
// shorter than repeatMoreUnder (a gigabit cast of 1 GiB) swing the most:
// they get two casts more. A cast that only the links hold back
// reproduces closely: from linkBoundOnceFrom on, it is cast once. Casting stops early once a cast agrees with an earlier one within
// castsAgree.
const (
	repeatUnder       = 40 * time.Second
	repeatMoreUnder   = 10 * time.Second
	linkBoundOnceFrom = 20 * time.Second
	castsAgree        = 0.02
)

// castsFor is how many casts a run gets at most, given its first cast and
// the reps runs get.
func castsFor(first result, reps int) int {
	switch {
	case reps < 2 || first.seconds >= repeatUnder.Seconds():
		return 1
	case linkBound(first.bottleneck) && first.seconds >= linkBoundOnceFrom.Seconds():
		return 1
	case first.seconds < repeatMoreUnder.Seconds():
		return reps + 2
	}
	return reps
}

// linkBound says the plan's bottleneck is links alone, all of the time.
// The preview names a mix by its shares ("92% of the time: links ...; 8%:
// decoding thread ...") and limits that bind alike after a semicolon
// ("link ...; CPU of machine lab ...").
func linkBound(bottleneck string) bool {
	return strings.HasPrefix(bottleneck, "link") && !strings.Contains(bottleneck, ";")
}

// settled says the last cast agrees with an earlier one, in its rate and
// in its prediction (the server measures the image for each).
func settled(all []result) bool {
	agree := func(a, b float64) bool { return math.Abs(a-b) <= castsAgree*max(a, b) }
	last := all[len(all)-1]
	for _, c := range all[:len(all)-1] {
		if agree(c.measured, last.measured) && agree(c.predicted, last.predicted) {
			return true
		}
	}
	return false
}

// runMedian runs r, and again when it is a short dolly cast (castsFor)
// until two casts agree in rate and prediction, and returns the cast of median rate with every
// cast's rate and prediction.
func (e *labEnv) runMedian(ctx context.Context, r runSpec, img image, reps int) result {
	res := e.run(ctx, r, img, true)
	if r.method != "dolly" || res.err != "" {
		return res
	}
	all := []result{res}
	for n := castsFor(res, reps); len(all) < n && ctx.Err() == nil; {
		syscall.Sync()
		next := e.run(ctx, r, img, false)
		if next.err != "" {
			return next // a failed cast is the news, not the median
		}
		all = append(all, next)
		if settled(all) {
			break
		}
	}
	return medianCast(all)
}

// medianCast is the cast of median rate, with the rate and prediction of
// every cast in the order cast. Its prediction is the median of theirs:
// the server times the image's decoding for each cast, on the same shared
// machine, so its predictions vary from cast to cast too.
func medianCast(all []result) result {
	med := medianBy(all, func(r result) float64 { return r.measured })
	med.predicted = medianBy(all, func(r result) float64 { return r.predicted }).predicted
	med.rate = medianBy(all, func(r result) float64 { return r.rate }).rate
	med.casts, med.castsPredicted, med.joins, med.joinParts = nil, nil, nil, nil
	for _, c := range all {
		med.casts, med.castsPredicted = append(med.casts, c.measured), append(med.castsPredicted, c.predicted)
		med.joins, med.joinParts = append(med.joins, c.joins...), append(med.joinParts, c.joinParts...)
	}
	return med
}

// medianBy is the element of median key: the lower of the middle two of
// an even number, and of equal keys the one earlier in xs.
func medianBy[T any](xs []T, key func(T) float64) T {
	sorted := slices.Clone(xs)
	slices.SortStableFunc(sorted, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return sorted[(len(sorted)-1)/2]
}
