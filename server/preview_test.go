package server

import (
	"strings"
	"testing"

	"dolly/capacity"
)

// The preview of a topology says which nodes a cast would serve apart:
// those behind a trunk thinner than the links, as a chain of their own;
// and says nothing of it where all nodes are alike.
func TestPreviewNotesNodesServedApart(t *testing.T) {
	lab := func(trunk string) string {
		return `{"name": "lab", "switches": [{"name": "sw1"}, {"name": "sw2"}],
 "links": [{"a": "sw1", "b": "sw2", "capacity": "` + trunk + `"}],
 "profiles": {"pc": {"model": "basic"}},
 "hosts": [
  {"name": "srv", "switch": "sw1", "link": "1Gbit", "role": "source", "profile": "pc"},
  {"name": "pc01", "switch": "sw1", "link": "1Gbit", "profile": "pc"}, {"name": "pc02", "switch": "sw1", "link": "1Gbit", "profile": "pc"},
  {"name": "pc03", "switch": "sw2", "link": "1Gbit", "profile": "pc"}, {"name": "pc04", "switch": "sw2", "link": "1Gbit", "profile": "pc"}],
 "image_size": "2GB"}`
	}
	tests := []struct {
		trunk string
		want  []string // in the note; none if empty
	}{
		{"100Mbit", []string{"pc03 (alone 12.5 MB/s) from pc02", "pc04 (alone 12.5 MB/s) from pc03", "others run at 125.0 MB/s, not 12.5"}},
		{"10Gbit", nil},
	}
	for _, tt := range tests {
		topo, err := capacity.ParseTopology([]byte(lab(tt.trunk)))
		if err != nil {
			t.Fatal(err)
		}
		results, notes, err := Preview(t.Context(), topo, "", 0, false)
		if err != nil || len(results) == 0 {
			t.Fatalf("trunk %s: %d results, %v", tt.trunk, len(results), err)
		}
		if len(tt.want) == 0 {
			if len(notes) > 0 {
				t.Errorf("trunk %s: notes %q, want none", tt.trunk, notes)
			}
			continue
		}
		if len(notes) != 1 {
			t.Fatalf("trunk %s: notes %q, want one", tt.trunk, notes)
		}
		for _, w := range tt.want {
			if !strings.Contains(notes[0], w) {
				t.Errorf("trunk %s: note %q lacks %q", tt.trunk, notes[0], w)
			}
		}
	}
}
