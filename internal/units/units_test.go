package units

import (
	"math"
	"testing"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"12.5MB/s", 12.5e6},
		{"125MB/s", 125e6},
		{"100Mbit", 12.5e6},
		{"1Gbit", 125e6},
		{"1Gbit/s", 125e6},
		{"10 Gbit/s", 1.25e9},
		{"4GB/s", 4e9},
		{"800kbit", 100e3},
		{"64KB", 64e3},
		{"64kB/s", 64e3},
		{"1KiB", 1024},
		{"1MiB/s", 1 << 20},
		{"2GiB", 2 << 30},
		{"8bit", 1},
		{"42B/s", 42},
		{"125e6", 125e6},
		{"1.5e3MB", 1.5e9},
		{" 7 ", 7},
		{".5MB", 0.5e6},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tt.in, err)
			continue
		}
		if !near(got, tt.want) {
			t.Errorf("ParseRate(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, in := range []string{"", "MB/s", "fast", "12.5mb/s", "12.5Mb", "1e", "-5MB", "12/s", "1.2.3MB", "5 MB/s/s", "NaN"} {
		if v, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, v)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"2GB", 2e9},
		{"1MiB", 1 << 20},
		{"4096", 4096},
		{"256KiB", 256 << 10},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"1MB/s", "big", "-1"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded, want an error", in)
		}
	}
}

// near reports whether a and b agree to a part in a billion.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{999, "999 B"},
		{1000, "1.0 kB"},
		{1500, "1.5 kB"},
		{50_331_648, "50.3 MB"},
		{536_870_912_000, "536.9 GB"}, // rounded, not cut
		{2_147_483_648, "2.1 GB"},
		{2e12, "2.0 TB"},
	}
	for _, tt := range tests {
		if got := FormatBytes(tt.n); got != tt.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
