package capacity

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestRowJSONFieldNames(t *testing.T) {
	data, err := json.Marshal(Row{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"bottleneck", "bytes_per_sec", "compression", "depth", "eta_seconds", "fanout",
		"nodes", "plan", "predicted_mbps", "topology"}
	if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, want) {
		t.Errorf("JSON fields %v, want %v", got, want)
	}
}

func TestPreviewRows(t *testing.T) {
	rows := previewRows(t, "patagonia-gbe.json")
	tests := []struct {
		plan, topology string
		fanout         int
		depth          int
	}{
		{"chain", "chain", 1, 5},
		{"2-tree", "tree", 2, 2},
		{"3-tree", "tree", 3, 2},
		{"4-tree", "tree", 4, 2},
		{"star", "star", 5, 1},
	}
	for _, tt := range tests {
		for _, compression := range []string{"none", "gzip"} {
			r, ok := findRow(rows, tt.topology, tt.fanout, compression)
			if !ok {
				t.Errorf("no row for %s/%s", tt.plan, compression)
				continue
			}
			if r.Plan != tt.plan || r.Depth != tt.depth || r.Nodes != 5 {
				t.Errorf("row %+v, want plan %s depth %d nodes 5", r, tt.plan, tt.depth)
			}
			if r.ETASeconds <= 2e9/r.BytesPerSec || !near(r.PredictedMBps*MB, r.BytesPerSec) {
				t.Errorf("row %+v: ETA or rate inconsistent", r)
			}
		}
	}
	if len(rows) != 10 {
		t.Errorf("%d rows, want 5 shapes × raw and compressed", len(rows))
	}
}

func TestFormatPreview(t *testing.T) {
	rows := []Row{
		{Plan: "chain", Compression: "none", PredictedMBps: 12.63, ETASeconds: 158.9, Bottleneck: "CPU of pc01 (in 1, out 1, disk)"},
		{Plan: "star", Compression: "gzip", PredictedMBps: 3.2, ETASeconds: 625.4, Bottleneck: "CPU of server (source: in 1, out 5, disk, decompress)"},
	}
	got := FormatPreview(rows)
	want := "" +
		"plan   compression  MB/s  ETA     bottleneck\n" +
		"chain  none         12.6  2m39s   CPU of pc01 (in 1, out 1, disk)\n" +
		"star   gzip         3.2   10m25s  CPU of server (source: in 1, out 5, disk, decompress)\n"
	if got != want {
		t.Errorf("FormatPreview:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(FormatPreview([]Row{{Plan: "chain"}}), "-") {
		t.Error("an unknown ETA should show as -")
	}
}
