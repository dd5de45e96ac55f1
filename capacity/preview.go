package capacity

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one plan of the preview shown before a cast.
type Row struct {
	Plan          string  `json:"plan"`        // "chain", "2-tree", "star", "tree"
	Topology      string  `json:"topology"`    // "chain", "tree" or "star"
	Fanout        int     `json:"fanout"`      // chain 1, n-ary tree n, star the number of clients
	Compression   string  `json:"compression"` // "none" or the codec
	PredictedMBps float64 `json:"predicted_mbps"`
	ETASeconds    float64 `json:"eta_seconds"`
	Bottleneck    string  `json:"bottleneck"`
	Nodes         int     `json:"nodes"`
	Depth         int     `json:"depth"`
	BytesPerSec   float64 `json:"bytes_per_sec"`
}

// Preview returns one row per result, in the order given.
func Preview(results []Result) []Row {
	rows := make([]Row, 0, len(results))
	for _, r := range results {
		t := r.Plan.Tree
		row := Row{
			Plan:          t.Name(),
			Topology:      string(t.Kind),
			Fanout:        t.Fanout,
			Compression:   r.Plan.Compression.Name(),
			PredictedMBps: r.Rate / MB,
			ETASeconds:    r.ETA.Seconds(),
			Bottleneck:    r.Bottleneck,
			Nodes:         t.Nodes(),
			Depth:         r.Depth,
			BytesPerSec:   r.Rate,
		}
		if t.Kind == KindExplicit {
			row.Topology = string(KindTree)
		}
		if t.Kind == KindStar {
			row.Fanout = t.Nodes()
		}
		rows = append(rows, row)
	}
	return rows
}

// FormatPreview renders rows as a plain-text table for people.
func FormatPreview(rows []Row) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "plan\tcompression\tMB/s\tETA\tbottleneck")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%.1f\t%s\t%s\n", r.Plan, r.Compression, r.PredictedMBps,
			formatETA(r.ETASeconds), r.Bottleneck)
	}
	w.Flush()
	return b.String()
}

// formatETA rounds to whole seconds ("2m51s"), or tenths below ten seconds.
func formatETA(seconds float64) string {
	switch {
	case seconds <= 0 || seconds >= math.MaxInt64/float64(time.Second):
		return "-"
	case seconds < 10:
		return fmt.Sprintf("%.1fs", seconds)
	}
	return time.Duration(math.Round(seconds) * float64(time.Second)).String()
}
