package imaging

import "fmt"

// FormatBytes renders a byte count for people in decimal units (1 MB = 10^6
// bytes), the units the rest of dolly uses for sizes and rates.
func FormatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB", "PB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%.1f EB", f/unit)
}
