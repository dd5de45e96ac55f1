package capacity

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestReadmeExamples keeps the JSON in README.md valid: topology examples
// must parse, the probe example must decode as a host, the row as a Row.
func TestReadmeExamples(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(data), "```json\n")[1:]
	if len(blocks) < 4 {
		t.Fatalf("found %d JSON blocks in README.md", len(blocks))
	}
	for _, b := range blocks {
		block, _, _ := strings.Cut(b, "```")
		switch {
		case strings.Contains(block, `"hosts"`):
			if _, err := ParseTopology([]byte(block)); err != nil {
				t.Errorf("README topology example: %v\n%s", err, block)
			}
		case strings.Contains(block, `"probe"`):
			topo := `{"switches": [{"name": "sw1"}], "hosts": [` + block + `]}`
			if _, err := ParseTopology([]byte(topo)); err != nil {
				t.Errorf("README host example: %v\n%s", err, block)
			}
		default:
			var row Row
			dec := json.NewDecoder(strings.NewReader(block))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&row); err != nil {
				t.Errorf("README row example: %v\n%s", err, block)
			}
		}
	}
}
