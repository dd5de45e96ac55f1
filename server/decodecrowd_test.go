package server

import (
	"math"
	"strings"
	"testing"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/imaging"
)

// The machine's decoding rate in a crowd is its decoders' bytes over
// their CPU time, all of them together; a machine of which a node did not
// answer, or whose nodes decoded nothing, has none, and the preview says
// why.
func TestDecodeCrowds(t *testing.T) {
	alone := &capacity.Probe{Cores: 2, DecompressBytesPerSec: map[string]float64{"zstd": 2000e6}}
	nodes := []*nodeState{{name: "a"}, {name: "b"}}
	tests := []struct {
		name    string
		results []control.NetResult
		failed  string
		rate    float64 // 0: none
		note    string
	}{
		{"two decoders", []control.NetResult{{Bytes: 60e6, CPU: 0.04}, {Bytes: 100e6, CPU: 0.06}}, "", 1600e6,
			"2 nodes of one machine of 2 cores decoded zstd at once: 1600.0 MB/s a core each, 0.80× what one decoded alone; the model counts the mean of the two costs a byte, 1777.8 MB/s a core"},
		{"one missing", []control.NetResult{{Bytes: 60e6, CPU: 0.04}}, "no thread CPU clock to time the decoders by", 0,
			"decoders: 1 of the 2 nodes on one machine measured together (no thread CPU clock to time the decoders by)"},
		{"no time counted", []control.NetResult{{Bytes: 60e6}, {Bytes: 60e6}}, "", 0,
			"the 2 nodes on one machine decoded nothing at once: the model counts what one decoded alone"},
	}
	for _, tt := range tests {
		pushed := crowdAnswers{results: map[string][]control.NetResult{"box": tt.results}, failed: map[string]string{}}
		if tt.failed != "" {
			pushed.failed["box"] = tt.failed
		}
		var notes []string
		found := decodeCrowds(pushed, map[string][]*nodeState{"box": nodes}, map[string]*capacity.Probe{"box": alone}, &notes)
		d, ok := found["box"]
		if ok != (tt.rate > 0) || math.Abs(d.rate-tt.rate) > 1 {
			t.Errorf("%s: found %v (%v B/s), want %v B/s", tt.name, ok, d.rate, tt.rate)
		}
		if ok {
			notes = append(notes, d.note())
		}
		if len(notes) != 1 || !strings.Contains(notes[0], tt.note) {
			t.Errorf("%s: notes %q, want one saying %q", tt.name, notes, tt.note)
		}
	}
}

// The rate of the mean of the crowd's and the lone decoder's costs
// replaces the lone rate on its machine's nodes (1500 and 2000 MB/s:
// 1/1500 + 1/2000 over two is 1/1714), and their rate for RLE blocks
// scales alike; the source and other machines' nodes keep theirs, and no
// probe sharing the same rates is changed through them.
func TestCrowdDecoders(t *testing.T) {
	shared := map[string]float64{"zstd": 2000e6, "gzip": 300e6}
	probes := []capacity.Probe{
		{Hostname: "source", DecompressBytesPerSec: shared},
		{Hostname: "a", DecompressBytesPerSec: shared, RLEDecodeBytesPerSec: 10e9},
		{Hostname: "b", DecompressBytesPerSec: shared, RLEDecodeBytesPerSec: 10e9},
		{Hostname: "elsewhere", DecompressBytesPerSec: shared, RLEDecodeBytesPerSec: 10e9},
		{Hostname: "unprobed"},
	}
	machineOf := []string{"box", "box", "box", "other", "box"}
	crowdDecoders(probes, machineOf, map[string]decodeCrowd{"box": {nodes: 2, cores: 2, rate: 1500e6, alone: 2000e6}})
	for i, want := range []struct {
		zstd, gzip, rle float64
	}{{2000e6, 300e6, 0}, {12e9 / 7, 300e6, 60e9 / 7}, {12e9 / 7, 300e6, 60e9 / 7}, {2000e6, 300e6, 10e9}, {0, 0, 0}} {
		p := probes[i]
		near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*want }
		if !near(p.DecompressBytesPerSec["zstd"], want.zstd) || p.DecompressBytesPerSec["gzip"] != want.gzip || !near(p.RLEDecodeBytesPerSec, want.rle) {
			t.Errorf("%s: zstd %v, gzip %v, RLE %v; want %v, %v, %v", p.Hostname, p.DecompressBytesPerSec["zstd"],
				p.DecompressBytesPerSec["gzip"], p.RLEDecodeBytesPerSec, want.zstd, want.gzip, want.rle)
		}
	}
	if shared["zstd"] != 2000e6 {
		t.Errorf("the rates the probes shared were changed: %v", shared)
	}
}

// Without a lone figure, the crowd's rate counts as it is, and the note
// says so.
func TestDecodeCrowdWithoutALoneFigure(t *testing.T) {
	d := decodeCrowd{nodes: 4, cores: 2, rate: 1500e6}
	if got := d.counted(); got != 1500e6 {
		t.Errorf("counted %v B/s, want the crowd's 1500e6", got)
	}
	if want := "4 nodes of one machine of 2 cores decoded zstd at once: 1500.0 MB/s a core each; the model counts it"; d.note() != want {
		t.Errorf("note %q, want %q", d.note(), want)
	}
}

// Of a crowded machine's nodes, two for each of its cores decode at once:
// all of them where there are fewer.
func TestDecoderCrowds(t *testing.T) {
	nodes := func(n int) []*nodeState {
		var ns []*nodeState
		for range n {
			ns = append(ns, &nodeState{})
		}
		return ns
	}
	crowded := map[string][]*nodeState{"big": nodes(24), "small": nodes(3), "unknown": nodes(5)}
	alone := map[string]*capacity.Probe{"big": {Cores: 2}, "small": {Cores: 2}, "unknown": {}}
	got := decoderCrowds(crowded, alone)
	for m, want := range map[string]int{"big": 4, "small": 3, "unknown": 5} {
		if len(got[m]) != want || (want > 0 && got[m][0] != crowded[m][0]) {
			t.Errorf("%s: %d nodes decode, want the first %d", m, len(got[m]), want)
		}
	}
}

// The decoders' crowd is measured only where a plan may have the nodes
// decode zstd.
func TestNodesMayDecode(t *testing.T) {
	tests := []struct {
		stored   imaging.Encoding
		compress Compress
		want     bool
	}{
		{imaging.Raw, CompressAuto, true},
		{imaging.Raw, CompressYes, true},
		{imaging.Raw, CompressNo, false},
		{imaging.Zstd, CompressAuto, true},
		{imaging.Zstd, CompressNo, false},
		{imaging.Gzip, CompressAuto, false},
	}
	for _, tt := range tests {
		s := &Server{cfg: Config{Compress: tt.compress}, img: &imaging.Image{Encoding: tt.stored}}
		if got := s.nodesMayDecode(); got != tt.want {
			t.Errorf("%s image, -compress %s: %v, want %v", tt.stored, tt.compress, got, tt.want)
		}
	}
}
