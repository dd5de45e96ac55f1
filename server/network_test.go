package server

import (
	"math"
	"slices"
	"testing"
	"time"

	"dolly/capacity"
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
