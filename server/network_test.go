package server

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/imaging"
)

// TestDecodeRateSwapsTheRLEFill: an image's RLE blocks are counted at
// each host's own fill speed, its data at the image's factor.
func TestDecodeRateSwapsTheRLEFill(t *testing.T) {
	const sample = 2000e6
	for _, tc := range []struct {
		name                              string
		rle, factor, q, rleShare, skipped float64
		want                              float64
	}{
		{"no RLE blocks: the factor", 1000e6, 1.1, 0, 0, 0, 2200e6},
		{"the host's fill not measured: the factor", 0, 1.1, 0.6, 1.5, 0, 2200e6},
		// A host that fills as fast, against its sample, as the server
		// did decodes the image at the server's factor.
		{"a host that fills as the server does", 3000e6, 1.1, 0.6, 1.5, 0, 2200e6},
		// Data: 1/1.1 - 0.6/1.5 = 0.509 of the sample's cost a byte; RLE
		// blocks: 0.6 * 2000/1000 = 1.2.
		{"a host that fills at half the server's speed", 1000e6, 1.1, 0.6, 1.5, 0, sample / (1/1.1 - 0.4 + 1.2)},
		{"an image all RLE blocks", 1000e6, 1.5, 1, 1.5, 0, 1000e6},
		{"an RLE share past the image's cost counts its data as free", 1000e6, 1.1, 0.9, 0.5, 0, sample / (0.9 * 2)},
		// Of the 0.6 from RLE blocks, 0.5 is deep in runs of zeros: only
		// 0.1 is filled, at 2000/1000 the sample's cost.
		{"zeros deep in runs cost nothing", 1000e6, 1.1, 0.6, 1.5, 0.5, sample / (1/1.1 - 0.4 + 0.2)},
		{"and with no fill figure of the host's", 0, 1.1, 0.6, 1.5, 0.5, sample / (1/1.1 - 0.4 + 0.1/1.5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decodeRate(sample, tc.rle, tc.factor, tc.q, tc.rleShare, tc.skipped)
			if math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Errorf("decodeRate = %.0f, want %.0f", got, tc.want)
			}
		})
	}
}

// TestMergeMachineProbesKeepsTheNodesDecoders: the nodes of the source's
// machine keep the decoders' figures they measured in their own program;
// the other figures are the machine's best.
func TestMergeMachineProbesKeepsTheNodesDecoders(t *testing.T) {
	source := capacity.Probe{MemcpyBytesPerSec: 9e9, DecompressBytesPerSec: map[string]float64{"zstd": 3e9}, RLEDecodeBytesPerSec: 2e9}
	node := capacity.Probe{MemcpyBytesPerSec: 8e9, DecompressBytesPerSec: map[string]float64{"zstd": 2e9}, RLEDecodeBytesPerSec: 1e9}
	probes := []capacity.Probe{source, node, node}
	mergeMachineProbes(probes, []string{"m", "m", "m"})
	for i, p := range probes {
		if p.MemcpyBytesPerSec != 9e9 {
			t.Errorf("probe %d: copy at %.0f, want the machine's best 9e9", i, p.MemcpyBytesPerSec)
		}
	}
	if got := probes[0].DecompressBytesPerSec["zstd"]; got != 3e9 {
		t.Errorf("the source decodes at %.0f, want its own 3e9", got)
	}
	for _, p := range probes[1:] {
		if got := p.DecompressBytesPerSec["zstd"]; got != 2e9 {
			t.Errorf("a node decodes at %.0f, want the nodes' 2e9", got)
		}
		if p.RLEDecodeBytesPerSec != 1e9 {
			t.Errorf("a node fills RLE blocks at %.0f, want the nodes' 1e9", p.RLEDecodeBytesPerSec)
		}
	}
}

// TestMergeMachineProbesTakesTheNodesMedianDecoder: the nodes of one
// machine, timed at different moments, decode at the median of their
// figures, not at the best one's; the other figures are the best.
func TestMergeMachineProbesTakesTheNodesMedianDecoder(t *testing.T) {
	node := func(copyRate, zstd, gzip, rle float64) capacity.Probe {
		return capacity.Probe{MemcpyBytesPerSec: copyRate, RLEDecodeBytesPerSec: rle,
			DecompressBytesPerSec: map[string]float64{"zstd": zstd, "gzip": gzip}}
	}
	// The source decodes at speeds of its own: counted, it would move
	// every median.
	source := node(5e9, 0.5e9, 2e9, 30e9)
	probes := []capacity.Probe{
		source,
		node(8e9, 1.8e9, 0.39e9, 14e9),
		node(7e9, 1.2e9, 0.27e9, 10e9),
		node(6e9, 1.5e9, 0.30e9, 13e9),
		node(9e9, 1.4e9, 0.28e9, 12e9), // another machine
		// Measured zstd alone, and no RLE blocks: it gets the others'
		// gzip, and still no RLE figure.
		{MemcpyBytesPerSec: 1e9, DecompressBytesPerSec: map[string]float64{"zstd": 1.3e9}},
	}
	mergeMachineProbes(probes, []string{"m", "m", "m", "m", "other", "m"})
	for i, p := range slices.Concat(probes[:4], probes[5:]) {
		if p.MemcpyBytesPerSec != 8e9 {
			t.Errorf("probe %d: copy at %.3g, want the machine's best 8e9", i, p.MemcpyBytesPerSec)
		}
	}
	// zstd: 1.2 1.3 1.5 1.8 (the upper median); gzip: 0.27 0.30 0.39.
	for i, p := range slices.Concat(probes[1:4], probes[5:]) {
		if z, g := p.DecompressBytesPerSec["zstd"], p.DecompressBytesPerSec["gzip"]; z != 1.5e9 || g != 0.30e9 {
			t.Errorf("node %d decodes zstd at %.3g and gzip at %.3g, want the median 1.5e9 and 0.3e9", i+1, z, g)
		}
	}
	for i, p := range probes[1:4] {
		if p.RLEDecodeBytesPerSec != 13e9 {
			t.Errorf("node %d fills RLE blocks at %.3g, want the median 13e9", i+1, p.RLEDecodeBytesPerSec)
		}
	}
	if r := probes[5].RLEDecodeBytesPerSec; r != 0 {
		t.Errorf("a node that timed no RLE blocks fills them at %.3g, want 0 (unknown)", r)
	}
	if p := probes[4]; p.DecompressBytesPerSec["zstd"] != 1.4e9 || p.MemcpyBytesPerSec != 9e9 {
		t.Errorf("the other machine's node was changed: %+v", p)
	}
	if z, r := probes[0].DecompressBytesPerSec["zstd"], probes[0].RLEDecodeBytesPerSec; z != 0.5e9 || r != 30e9 {
		t.Errorf("the source decodes zstd at %.3g and RLE blocks at %.3g, want its own 0.5e9 and 30e9", z, r)
	}
}

// TestZeroedRuns: the nodes zero the zero runs outside free blocks, and
// the preview says what that costs disks that zero by writing.
func TestZeroedRuns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		zero, free float64
		writing    int
		want       float64
		note       string
	}{
		{"no map: every zero run", 0.6, 0, 3, 0.6, "3 of 4 nodes zero by writing zeros (their disks take no write-zeroes command): the 60% of the image in zero runs outside free blocks costs their disks a write"},
		{"a map: the zeros in use", 0.6, 0.5, 4, 0.1, "4 of 4 nodes zero by writing zeros (their disks take no write-zeroes command): the 10% of the image in zero runs outside free blocks costs their disks a write"},
		{"disks that zero in place say nothing", 0.6, 0, 0, 0.6, ""},
		{"free blocks holding old data", 0.2, 0.5, 4, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note := zeroedRuns(tc.zero, tc.free, tc.writing, 4)
			if math.Abs(got-tc.want) > 1e-9 || note != tc.note {
				t.Errorf("zeroedRuns = %v, %q; want %v, %q", got, note, tc.want, tc.note)
			}
		})
	}
}

// The start-up is what the probes measured: the longest connection and
// the longest final flush; nothing when the connections went unmeasured.
func TestStartupIsMeasured(t *testing.T) {
	flushed := func(s float64) *nodeState { return &nodeState{probe: &capacity.Probe{SyncSeconds: s}} }
	tests := []struct {
		name    string
		ready   []*nodeState
		connect time.Duration
		want    time.Duration
		note    string
	}{
		{"no bandwidth probes", []*nodeState{flushed(0.02)}, 0, 0, ""},
		{"connections and flushes", []*nodeState{flushed(0.004), flushed(0.025), {}}, 3 * time.Millisecond, 28 * time.Millisecond,
			"start-up 28 ms: connecting took 3.0 ms, a target's final flush 25 ms"},
		{"targets not measured", []*nodeState{{}, {}}, 12 * time.Millisecond, 12 * time.Millisecond,
			"start-up 12 ms: connecting took 12 ms (the targets' final flush not measured)"},
	}
	for _, tt := range tests {
		got, note := startup(tt.ready, netFigures{connect: tt.connect})
		if got != tt.want || note != tt.note {
			t.Errorf("%s: %v %q, want %v %q", tt.name, got, note, tt.want, tt.note)
		}
	}
}

// A link nobody measured is no free link. The source's, unknown, counts
// as the slowest link measured in the lab, and a star, which loads it
// with a stream per node, does not win on it.
func TestAssumeLinksGivesAnUnknownLinkTheSlowest(t *testing.T) {
	const fe, gbe = 12.5e6, 125e6
	lab := func() capacity.Network {
		net := crowdedLab(4, gbe)
		for i := range net.Hosts {
			net.Hosts[i].Machine = "" // a PC each
		}
		net.Hosts[0].Link = 0 // the source's: no NIC speed, no star probe
		net.Hosts[2].Link = fe
		return net
	}
	opt := capacity.Options{ImageBytes: 1 << 30}
	free, err := Choose(lab(), opt, "", 0, CompressNo, imaging.Raw)
	if err != nil {
		t.Fatal(err)
	}
	// Left free, the source's link lets a star tie with the chain, both
	// at the slow node's link, and the star's shallow tree wins.
	if kind := free.Result.Plan.Tree.Kind; kind == capacity.KindChain {
		t.Fatalf("with the source's link free, -auto chose a %s: the test no longer shows what a free link does", kind)
	}

	net := lab()
	// SourceName stands for the source whatever the network names it
	// (a topology file's name for it, here "source").
	notes := assumeLinks(&net, []string{SourceName})
	if got := net.Hosts[0].Link; got != fe {
		t.Errorf("the source's link: %.4g B/s, want the slowest measured, %.4g", got, fe)
	}
	if want := "link speed unknown for source (no NIC speed, no bandwidth probe): counted as the slowest measured, 12.5 MB/s"; len(notes) != 1 || notes[0] != want {
		t.Errorf("notes %q, want %q", notes, want)
	}
	for _, h := range net.Hosts[1:] {
		if want := map[bool]float64{true: fe, false: gbe}[h.Name == net.Hosts[2].Name]; h.Link != want {
			t.Errorf("%s's measured link changed: %.4g B/s, want %.4g", h.Name, h.Link, want)
		}
	}
	ch, err := Choose(net, opt, "", 0, CompressNo, imaging.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if kind := ch.Result.Plan.Tree.Kind; kind != capacity.KindChain {
		t.Errorf("-auto chose a %s (%s), want a chain", kind, describeChoice(ch))
	}
}

// Where no link at all was measured, the hosts stay unknown, the note
// says the predictions count the machines alone, and -auto keeps to a
// chain unless every node is on loopback, where there is no link.
func TestLinksUnknown(t *testing.T) {
	unknown := crowdedLab(2, 0)
	notes := assumeLinks(&unknown, []string{"source", "pcb", "pcc"})
	if len(notes) != 1 || !strings.Contains(notes[0], "link speed unknown for source, pcb, pcc ") || !strings.Contains(notes[0], "no link measured: the predictions count the machines alone") {
		t.Errorf("notes %q", notes)
	}
	for _, h := range unknown.Hosts {
		if h.Link != 0 {
			t.Errorf("%s's link set to %.4g B/s with nothing measured", h.Name, h.Link)
		}
	}
	overNetwork := []*nodeState{{name: "pcb", dataAddr: "198.18.0.2:9700"}, {name: "pcc", dataAddr: "198.18.0.3:9700"}}
	onLoopback := []*nodeState{{name: "pcb", dataAddr: "127.0.0.1:9702"}, {name: "pcc", dataAddr: "127.0.0.1:9703"}}
	for _, tt := range []struct {
		name  string
		net   capacity.Network
		ready []*nodeState
		want  bool
	}{
		{"no link known, nodes over a network", unknown, overNetwork, true},
		{"no link known, nodes on loopback", unknown, onLoopback, false},
		{"links known", crowdedLab(2, 12.5e6), overNetwork, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := linksUnknown(tt.net, tt.ready); got != tt.want {
				t.Errorf("linksUnknown = %v, want %v", got, tt.want)
			}
		})
	}
}
