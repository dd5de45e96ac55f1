package capacity

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadExample parses one of the shipped topology files.
func loadExample(t testing.TB, name string) *Topology {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("examples", name))
	if err != nil {
		t.Fatal(err)
	}
	topo, err := ParseTopology(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return topo
}

// previewRows ranks a shipped example and returns its preview.
func previewRows(t testing.TB, name string) []Row {
	t.Helper()
	results, err := loadExample(t, name).Rank()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return Preview(results)
}

func findRow(rows []Row, topology string, fanout int, compression string) (Row, bool) {
	for _, r := range rows {
		if r.Topology == topology && r.Fanout == fanout && r.Compression == compression {
			return r, true
		}
	}
	return Row{}, false
}

// TestTableI checks the "Extended model" columns of Table I of the paper.
func TestTableI(t *testing.T) {
	tests := []struct {
		file        string
		topology    string
		fanout      int
		compression string
		want        float64 // MB/s as printed in Table I
		tolerance   float64 // MB/s
	}{
		{"patagonia-fe.json", "chain", 1, "none", 12.5, 0.1},
		{"patagonia-fe.json", "chain", 1, "gzip", 3.9, 0.1},
		{"patagonia-fe.json", "tree", 2, "none", 6.3, 0.1},
		{"patagonia-fe.json", "tree", 3, "none", 4.2, 0.1},
		{"patagonia-fe.json", "star", 5, "none", 2.5, 0.1},
		{"patagonia-fe.json", "star", 5, "gzip", 3.0, 3.0 * 0.15},
		{"patagonia-gbe.json", "chain", 1, "none", 12.6, 0.1},
		{"patagonia-gbe.json", "chain", 1, "gzip", 3.9, 0.1},
		{"patagonia-gbe.json", "tree", 2, "none", 9.3, 0.1},
		{"patagonia-gbe.json", "tree", 3, "none", 7.4, 0.1},
		{"patagonia-gbe.json", "star", 5, "none", 5.3, 5.3 * 0.15},
		{"patagonia-gbe.json", "star", 5, "gzip", 3.0, 3.0 * 0.15},
	}
	rows := map[string][]Row{}
	for _, tt := range tests {
		if rows[tt.file] == nil {
			rows[tt.file] = previewRows(t, tt.file)
		}
		r, ok := findRow(rows[tt.file], tt.topology, tt.fanout, tt.compression)
		if !ok {
			t.Errorf("%s: no row for %s fanout %d compression %s", tt.file, tt.topology, tt.fanout, tt.compression)
			continue
		}
		t.Logf("%-18s %-5s %d %-4s %5.2f MB/s (paper %.1f)  %s", tt.file, tt.topology, tt.fanout,
			tt.compression, r.PredictedMBps, tt.want, r.Bottleneck)
		if math.Abs(r.PredictedMBps-tt.want) > tt.tolerance {
			t.Errorf("%s %s fanout %d %s: %.2f MB/s, Table I says %.1f (±%.2f)",
				tt.file, tt.topology, tt.fanout, tt.compression, r.PredictedMBps, tt.want, tt.tolerance)
		}
	}
}

// TestTableIBottlenecks checks the reasons the paper gives.
func TestTableIBottlenecks(t *testing.T) {
	tests := []struct {
		file, topology string
		fanout         int
		compression    string
		want           string
	}{
		{"patagonia-fe.json", "chain", 1, "none", "link"},
		{"patagonia-fe.json", "star", 5, "none", "link server→ssr shared by 5 channels"},
		{"patagonia-gbe.json", "chain", 1, "none", "CPU of server"},
		{"patagonia-gbe.json", "chain", 1, "gzip", "(source: in 1, out 1, disk, decompress)"},
		{"patagonia-gbe.json", "star", 5, "none", "CPU of server (source: in 1, out 5, disk)"},
	}
	for _, tt := range tests {
		r, ok := findRow(previewRows(t, tt.file), tt.topology, tt.fanout, tt.compression)
		if !ok {
			t.Fatalf("%s: no %s row", tt.file, tt.topology)
		}
		if !strings.Contains(r.Bottleneck, tt.want) {
			t.Errorf("%s %s %s: bottleneck %q, want it to mention %q", tt.file, tt.topology, tt.compression, r.Bottleneck, tt.want)
		}
	}
}

func TestFigure5(t *testing.T) {
	topo := loadExample(t, "figure5.json")
	if topo.Tree == nil {
		t.Fatal("figure5.json has no explicit tree")
	}
	r, err := Evaluate(topo.Network, *topo.Tree, topo.Options)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Rate / MB; math.Abs(got-7.5) > 1e-9 {
		t.Errorf("rate %.3f MB/s, want 7.5", got)
	}
	if len(r.Binding) != 2 {
		t.Errorf("%d binding constraints, want the 2 nodes of out-degree 2: %v", len(r.Binding), r.Binding)
	}
	for _, c := range r.Binding {
		if c.Kind != SwitchingLimit || c.Flow.Out != 2 {
			t.Errorf("binding %v, want the switching capacity of a node with out-degree 2", c)
		}
	}
	want := "switching capacity of pc01 and pc02 (in 1, out 2, disk)"
	if r.Bottleneck != want {
		t.Errorf("bottleneck %q, want %q", r.Bottleneck, want)
	}
	// Every edge constraint stays above the nodes' limit.
	for _, c := range r.Constraints {
		if (c.Kind == LinkLimit || c.Kind == BackplaneLimit) && c.Bound() <= 7.5*MB {
			t.Errorf("edge constraint %v binds; the tree should leave links above 7.5 MB/s", c)
		}
	}
	rows := previewRows(t, "figure5.json")
	found := false
	for _, row := range rows {
		if row.Plan == "tree" && row.Compression == "none" {
			found = true
			if math.Abs(row.PredictedMBps-7.5) > 1e-9 || row.Fanout != 2 {
				t.Errorf("preview row %+v, want 7.5 MB/s with fanout 2", row)
			}
		}
	}
	if !found {
		t.Error("preview has no row for the file's explicit tree")
	}
}
