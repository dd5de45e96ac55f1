// Package units reads the sizes and rates people type ("64MiB", "100Mbit/s")
// and writes byte counts the way dolly shows them (decimal units).
package units

import (
	"fmt"

	"github.com/dustin/go-humanize"
	"math"
	"strconv"
	"strings"
)

// unitBytes maps a unit name to the number of bytes it stands for.
// Bit units are eighths of a byte so that "100Mbit" is 12.5 MB/s.
var unitBytes = map[string]float64{
	"":     1,
	"B":    1,
	"KB":   1e3,
	"kB":   1e3,
	"MB":   1e6,
	"GB":   1e9,
	"TB":   1e12,
	"KiB":  1 << 10,
	"MiB":  1 << 20,
	"GiB":  1 << 30,
	"TiB":  1 << 40,
	"bit":  1.0 / 8,
	"kbit": 1e3 / 8,
	"Kbit": 1e3 / 8,
	"Mbit": 1e6 / 8,
	"Gbit": 1e9 / 8,
	"Tbit": 1e12 / 8,
}

const unitHelp = "use B, KB, MB, GB, KiB, MiB, GiB, bit, kbit, Mbit or Gbit, optionally with /s"

// ParseRate parses a rate such as "12.5MB/s", "100Mbit", "1Gbit" or "125e6"
// and returns bytes per second. A plain number is bytes per second; the "/s"
// suffix is optional.
func ParseRate(s string) (float64, error) {
	v, _, err := parseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	return v, nil
}

// ParseSize parses a size such as "2GB", "1MiB" or "4096" and returns bytes.
func ParseSize(s string) (int64, error) {
	v, perSecond, err := parseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	if perSecond {
		return 0, fmt.Errorf("size %q: a size has no \"/s\"", s)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(math.Round(v)), nil
}

// parseQuantity splits s into a number and a unit and reports whether the
// unit ended in "/s".
func parseQuantity(s string) (value float64, perSecond bool, err error) {
	t := strings.TrimSpace(s)
	if rest, ok := strings.CutSuffix(t, "/s"); ok {
		t, perSecond = strings.TrimSpace(rest), true
	}
	n := numberPrefix(t)
	if n == 0 {
		return 0, false, fmt.Errorf("no number (e.g. \"12.5MB/s\")")
	}
	v, err := strconv.ParseFloat(t[:n], 64)
	if err != nil {
		return 0, false, fmt.Errorf("bad number %q: %w", t[:n], err)
	}
	unit := strings.TrimSpace(t[n:])
	scale, ok := unitBytes[unit]
	if !ok {
		return 0, false, fmt.Errorf("unknown unit %q: %s", unit, unitHelp)
	}
	if perSecond && unit == "" {
		return 0, false, fmt.Errorf("\"/s\" needs a unit: %s", unitHelp)
	}
	v *= scale
	if v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false, fmt.Errorf("must be a finite number ≥ 0")
	}
	return v, perSecond, nil
}

// numberPrefix returns the length of the decimal number at the start of s,
// allowing a fraction and an exponent ("1.5e9").
func numberPrefix(s string) int {
	i := 0
	digits := func() {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	digits()
	if i < len(s) && s[i] == '.' {
		i++
		digits()
	}
	if i == 0 || (i == 1 && s[0] == '.') {
		return 0
	}
	// An exponent only counts when digits follow, so "1e" is not a number.
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && s[j] >= '0' && s[j] <= '9' {
			i = j
			digits()
		}
	}
	return i
}

// FormatBytes renders a byte count for people in decimal units (1 MB = 10^6
// bytes), the units the rest of dolly uses for sizes and rates, rounded to
// one decimal: "512 B", "1.5 kB", "536.9 GB". go-humanize picks the unit;
// its own formatting cuts digits off rather than rounding them (536.87 GB
// would read 536.8), so the number is formatted here.
func FormatBytes(n int64) string {
	v, prefix := humanize.ComputeSI(float64(n))
	if prefix == "" {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %sB", v, prefix)
}
