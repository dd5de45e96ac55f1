// Package natural orders names the way people number them: pc2 before
// pc10, nvme2n1 before nvme10n1. Every list of nodes or disks dolly shows
// or picks from is in this order.
package natural

import (
	"cmp"
	"strconv"
	"strings"
)

// Compare compares a and b run by run: runs of digits by value (a shorter
// spelling of the same value first: 2 before 02), other runs as text.
func Compare(a, b string) int {
	for a != "" && b != "" {
		ra, rb := run(a), run(b)
		ta, tb := a[:ra], b[:rb]
		a, b = a[ra:], b[rb:]
		na, errA := strconv.ParseUint(ta, 10, 64)
		nb, errB := strconv.ParseUint(tb, 10, 64)
		if errA == nil && errB == nil {
			if c := cmp.Or(cmp.Compare(na, nb), cmp.Compare(len(ta), len(tb))); c != 0 {
				return c
			}
			continue
		}
		if c := strings.Compare(ta, tb); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// Less reports whether a sorts before b.
func Less(a, b string) bool { return Compare(a, b) < 0 }

// run returns the length of the run of digits or of non-digits that
// starts s.
func run(s string) int {
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	i := 1
	for i < len(s) && digit(s[i]) == digit(s[0]) {
		i++
	}
	return i
}
