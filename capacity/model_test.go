package capacity

import (
	"strings"
	"testing"
)

const (
	gbe = 125 * MB
	fe  = 12.5 * MB
)

// patagonia is the paper's 400 MHz Pentium II node.
var patagonia = Resources{
	Model:  ModelPaper,
	Disk:   24 * MB,
	IOBus:  132 * MB,
	Memory: 180 * MB,
	Cores:  1,
	CPU: CPURates{Net: 60 * MB, Disk: 80 * MB, Copy: 90 * MB,
		Decompress: map[string]float64{"gzip": 10 * MB}},
}

func TestLinkConstraints(t *testing.T) {
	tests := []struct {
		name    string
		tree    Tree
		comp    Compression
		subject string
		streams int
		coef    float64
	}{
		{"chain uplink", Chain(3), Compression{}, "src→sw", 1, 1},
		{"chain downlink", Chain(3), Compression{}, "sw→n02", 1, 1},
		{"2-tree shares the uplink", NaryTree(3, 2), Compression{}, "src→sw", 2, 2},
		{"star shares the uplink", Star(3), Compression{}, "src→sw", 3, 3},
		{"star downlink", Star(3), Compression{}, "sw→n03", 1, 1},
		{"compressed stream costs b/c", Star(3), Compression{"gzip", 2}, "src→sw", 3, 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustEvaluate(t, oneSwitch(3, fe, patagonia), tt.tree, tt.comp)
			c := find(t, r, LinkLimit, tt.subject)
			if c.Streams != tt.streams || !near(c.Coef, tt.coef) || c.Cap != fe {
				t.Errorf("%v: streams %d coef %v cap %v, want %d, %v, %v", c, c.Streams, c.Coef, c.Cap, tt.streams, tt.coef, fe)
			}
		})
	}
}

func TestLinkDirectionsAreIndependent(t *testing.T) {
	// In a chain every middle node receives and sends one stream on its one
	// full-duplex link: neither direction is shared.
	r := mustEvaluate(t, oneSwitch(3, fe, Resources{Model: ModelBasic}), Chain(3), Compression{})
	for _, s := range []string{"n01→sw", "sw→n01", "n02→sw", "sw→n02"} {
		if c := find(t, r, LinkLimit, s); c.Streams != 1 {
			t.Errorf("%s carries %d channels, want 1", s, c.Streams)
		}
	}
	if has(r, LinkLimit, "n03→sw") {
		t.Error("the last node of the chain sends nothing, yet its uplink is constrained")
	}
	if !near(r.Rate, fe) {
		t.Errorf("rate %v, want the link's %v", r.Rate, fe)
	}
}

func TestBackplane(t *testing.T) {
	net := oneSwitch(4, gbe, Resources{Model: ModelBasic})
	net.Switches[0].Backplane = 100 * MB
	r := mustEvaluate(t, net, Star(4), Compression{})
	c := find(t, r, BackplaneLimit, "sw")
	if c.Streams != 4 || c.Coef != 4 {
		t.Errorf("backplane %v: want 4 streams", c)
	}
	if !near(r.Rate, 25*MB) || r.Binding[0].Kind != BackplaneLimit {
		t.Errorf("rate %v MB/s bound by %q, want 25 MB/s by the backplane", r.Rate/MB, r.Bottleneck)
	}
	if r.Bottleneck != "backplane of sw (4 streams)" {
		t.Errorf("bottleneck %q", r.Bottleneck)
	}
}

func TestBasicSwitching(t *testing.T) {
	res := Resources{Model: ModelBasic, Switching: 30 * MB, Disk: 24 * MB}
	tests := []struct {
		tree Tree
		want float64 // MB/s: 30/(1+o+1) for the node with the largest out-degree
	}{
		{Chain(4), 10},
		{NaryTree(6, 2), 7.5},
		{NaryTree(6, 3), 6},
		{Star(4), 5},
	}
	for _, tt := range tests {
		r := mustEvaluate(t, oneSwitch(tt.tree.Nodes(), gbe, res), tt.tree, Compression{})
		if !near(r.Rate, tt.want*MB) {
			t.Errorf("%s: %v MB/s, want %v", tt.tree.Name(), r.Rate/MB, tt.want)
		}
		if r.Binding[0].Kind != SwitchingLimit {
			t.Errorf("%s: bound by %q, want switching capacity", tt.tree.Name(), r.Bottleneck)
		}
	}
	// A leaf handles one stream in and the disk write: (1+0+1)·b ≤ 30.
	r := mustEvaluate(t, oneSwitch(1, gbe, res), Chain(1), Compression{})
	if c := find(t, r, SwitchingLimit, "n01"); c.Coef != 2 {
		t.Errorf("leaf switching coefficient %v, want 2", c.Coef)
	}
}

func TestDiskLimit(t *testing.T) {
	res := Resources{Model: ModelBasic, Switching: 1000 * MB, Disk: 24 * MB}
	r := mustEvaluate(t, oneSwitch(2, gbe, res), Chain(2), Compression{})
	if !near(r.Rate, 24*MB) {
		t.Errorf("rate %v MB/s, want the disk's 24", r.Rate/MB)
	}
	if !strings.HasPrefix(r.Bottleneck, "disk of src (image read); disk of n01 and n02") {
		t.Errorf("bottleneck %q", r.Bottleneck)
	}
}

// TestPaperRawNode checks the extended model's raw inequalities for a
// node with out-degree 2 (section 2.6 with the paper's figures).
func TestPaperRawNode(t *testing.T) {
	r := mustEvaluate(t, oneSwitch(6, gbe, patagonia), NaryTree(6, 2), Compression{})
	tests := []struct {
		kind ConstraintKind
		coef float64 // per byte/s
		cap  float64
	}{
		{DiskLimit, 1, 24 * MB},
		{IOBusLimit, 1 + 2 + 1, 132 * MB},
		{MemoryLimit, 1 + 2 + 1 + 2*(2+2), 180 * MB},
		{CPULimit, (3.0/60 + 1.0/80 + 4.0/90) / MB, 1},
	}
	for _, tt := range tests {
		c := find(t, r, tt.kind, "n01")
		if !near(c.Coef, tt.coef) || c.Cap != tt.cap {
			t.Errorf("%s: %v, want coef %v cap %v", tt.kind, c, tt.coef, tt.cap)
		}
		if c.Flow != (Flow{In: 1, Out: 2, Disk: true}) {
			t.Errorf("%s flow %+v", tt.kind, c.Flow)
		}
	}
	if got := find(t, r, CPULimit, "n01").Describe(); got != "CPU of n01 (in 1, out 2, disk)" {
		t.Errorf("describe %q", got)
	}
}

// TestPaperCompressedChain checks section 2.7's example inequalities for a
// chain node over Fast Ethernet with c = 2.
func TestPaperCompressedChain(t *testing.T) {
	c := 2.0
	r := mustEvaluate(t, oneSwitch(3, fe, patagonia), Chain(3), Compression{"gzip", c})
	tests := []struct {
		kind    ConstraintKind
		subject string
		coef    float64
	}{
		{LinkLimit, "sw→n01", 1 / c},
		{LinkLimit, "n01→sw", 1 / c},
		{DiskLimit, "n01", 1},
		{IOBusLimit, "n01", 2/c + 1},
		{MemoryLimit, "n01", 8/c + 3},
		{CPULimit, "n01", (2/(60*c) + 1.0/80 + 3/(90*c) + 1.0/90 + c/10) / MB},
	}
	for _, tt := range tests {
		got := find(t, r, tt.kind, tt.subject)
		if !near(got.Coef, tt.coef) {
			t.Errorf("%s %s: coef %v, want %v", tt.kind, tt.subject, got.Coef, tt.coef)
		}
	}
	if got := r.Rate / MB; got < 3.85 || got > 3.95 {
		t.Errorf("compressed chain %.3f MB/s, want 3.9", got)
	}
	if cpu := find(t, r, CPULimit, "n01"); !cpu.Flow.Decompress {
		t.Error("a compressed chain node should decompress")
	}
}

func TestMissingDecompressRate(t *testing.T) {
	net := oneSwitch(2, fe, patagonia)
	_, err := Evaluate(net, Plan{Tree: Chain(2), Hosts: hostNames(net), Compression: Compression{"zstd", 3}}, Options{})
	if err == nil || !strings.Contains(err.Error(), `"zstd"`) {
		t.Errorf("error %v, want one naming the missing codec", err)
	}
}

// dollyRes is a node of the dolly model with round figures.
var dollyRes = Resources{
	Model:  ModelDolly,
	Disk:   300 * MB,
	IOBus:  8000 * MB,
	Memory: 10000 * MB,
	Cores:  4,
	CPU: CPURates{Net: 1000 * MB, Copy: 2000 * MB, Digest: 4000 * MB,
		Decompress: map[string]float64{"zstd": 1000 * MB}},
}

func TestDollyModel(t *testing.T) {
	serial := dollyRes
	serial.ParallelDecompress = false
	parallel := dollyRes
	parallel.ParallelDecompress = true
	relayed := dollyRes
	relayed.CPU.Relay = 500 * MB
	// A stream in and out at the link's pace cost 4 ns a byte, 1 more
	// than two streams (1 each) and two copies (0.5 each): the stream
	// received pays that 1 more, the streams sent nothing.
	paced := relayed
	paced.CPU.Link = 250 * MB
	// One that costs no more than over loopback adds nothing.
	quick := relayed
	quick.CPU.Link = 1000 * MB
	// A source whose own path was probed whole: the read through the page
	// cache, and the feed (pipe, relay, history, send) for one child.
	fed := serial
	fed.CPU.Read = 1000 * MB
	fed.CPU.Feed = 500 * MB
	// A source that compresses on the fly.
	compressing := serial
	compressing.CPU.Compress = map[string]float64{"zstd": 500 * MB}
	const ns = 1e-9 // per byte/s, the figures above are in GB/s
	tests := []struct {
		name    string
		res     Resources
		comp    Compression
		subject string
		want    map[ConstraintKind]float64
		opt     Options
	}{
		// Relay with two children, raw: w = d = 1.
		{"node raw", serial, Compression{}, "n01", map[ConstraintKind]float64{
			DiskLimit:  1,
			IOBusLimit: 3 + 1,
			// DMAs, read copy, CRC, write copy, disk DMA: the digest is
			// made of the frames' CRCs.
			MemoryLimit: 3 + 2 + 1 + 2 + 1,
			CPULimit:    (3/1.0 + 1/2.0 + 1/4.0 + 1/2.0) * ns,
		}, Options{}},
		// The relay's path probed whole (for one child) stands for the
		// streams, the read copy and the CRC; each other child adds a
		// stream, a leaf saves one but never half the path.
		{"node raw, relay probed, two children", relayed, Compression{}, "n01", map[ConstraintKind]float64{
			CPULimit: (1/0.5 + 1/1.0 + 1/2.0) * ns,
		}, Options{}},
		{"node raw, relay probed, a leaf", relayed, Compression{}, "n03", map[ConstraintKind]float64{
			CPULimit: (1/0.5 - 1/1.0 + 1/2.0) * ns,
		}, Options{}},
		// At the link's pace the stream received costs 1 more, whatever
		// the node sends on.
		{"node raw, at the link's pace, two children", paced, Compression{}, "n01", map[ConstraintKind]float64{
			CPULimit: (1/0.5 + 1/1.0 + 1/2.0 + 1) * ns,
		}, Options{}},
		{"node raw, at the link's pace, a leaf", paced, Compression{}, "n03", map[ConstraintKind]float64{
			CPULimit: (1/0.5 - 1/1.0 + 1/2.0 + 1) * ns,
		}, Options{}},
		{"node compressed, at the link's pace, a leaf", paced, Compression{"zstd", 2}, "n03", map[ConstraintKind]float64{
			// the wire's half-bytes pay the pace; the decoder's thread as above
			CPULimit: (0.5*(1/0.5-1/1.0) + 1/2.0 + 0.5*1 + (1/1.0 + 0.5/2.0 + 1/4.0 + 1/4.0 + 1/2.0)) * ns,
		}, Options{}},
		{"node raw, a link no slower than loopback", quick, Compression{}, "n01", map[ConstraintKind]float64{
			CPULimit: (1/0.5 + 1/1.0 + 1/2.0) * ns,
		}, Options{}},
		// Compressed 2:1: w = 0.5 on the wire, d = 1 written.
		{"node compressed", serial, Compression{"zstd", 2}, "n01", map[ConstraintKind]float64{
			DiskLimit:   1,
			IOBusLimit:  1.5 + 1,
			MemoryLimit: 1.5 + 1 + 0.5 + 2 + 1 + 1 + (0.5 + 1 + 2 + 1),
			// streams, read copy, CRC, write, then the decoder's thread
			CPULimit: (1.5/1.0 + 0.5/2.0 + 0.5/4.0 + 1/2.0 + (1/1.0 + 0.5/2.0 + 1/4.0 + 1/4.0 + 1/2.0)) * ns,
			// decode, the payloads' copy into the decoder, zero scan, digest, aligned copy
			DecompressLimit: (1/1.0 + 0.5/2.0 + 1/4.0 + 1/4.0 + 1/2.0) * ns,
		}, Options{}},
		// 60% zero runs, d = 0.4. Sent as stored, the decoder hands half
		// the image on undecoded and scans the rest; compressed on the fly,
		// the zero runs are zero frames and it scans the data alone.
		{"node compressed, half undecoded", serial, Compression{"zstd", 2}, "n01", map[ConstraintKind]float64{
			// What it hands on undecoded it neither writes out of the
			// decoder nor scans: [in, out, gather copy, scan, digest].
			MemoryLimit: 1.5 + 1 + 0.5 + 0.8 + 0.4 + (0.5 + 0.5 + 0.8 + 0.5 + 0.4),
			CPULimit:    (1.5/1.0 + 0.5/2.0 + 0.5/4.0 + 0.4/2.0 + (1/1.0 + 0.5/2.0 + 0.5/4.0 + 0.4/4.0 + 0.4/2.0)) * ns,
		}, Options{ZeroFraction: 0.6, UndecodedFraction: 0.5}},
		{"node compressed on the fly", compressing, Compression{"zstd", 2}, "n01", map[ConstraintKind]float64{
			CPULimit: (1.5/1.0 + 0.5/2.0 + 0.5/4.0 + 0.4/2.0 + (1/1.0 + 0.5/2.0 + 0.4/4.0 + 0.4/4.0 + 0.4/2.0)) * ns,
		}, Options{ZeroFraction: 0.6, Stored: &Compression{Factor: 1}}},
		{"node compressed, parallel", parallel, Compression{"zstd", 2}, "n01", map[ConstraintKind]float64{
			CPULimit: (1.5/1.0 + 0.5/2.0 + 0.5/4.0 + 1/2.0 + (1/1.0 + 0.5/2.0 + 1/4.0 + 1/4.0 + 1/2.0)) * ns,
		}, Options{}},
		// Source of a raw image to two children: read, zero scan, one CRC
		// (the digest takes the frames'), a copy and a stream per child.
		{"source raw", serial, Compression{}, "src", map[ConstraintKind]float64{
			DiskLimit:   1,
			IOBusLimit:  1 + 2,
			MemoryLimit: 3 + 2 + 3*2,
			CPULimit:    (1/2.0 + 2/4.0 + 2/2.0 + 2/1.0) * ns,
		}, Options{}},
		// A sparse raw image, 60% zero runs of which 50% holes: only the
		// other half is read and scanned; the 40% of data is CRC'd and sent.
		{"source raw sparse", serial, Compression{}, "src", map[ConstraintKind]float64{
			DiskLimit:   0.5,
			IOBusLimit:  0.5 + 2*0.4,
			MemoryLimit: 3*0.5 + (0.5 + 0.4) + 3*2*0.4,
			CPULimit:    (0.5/2.0 + 0.9/4.0 + 0.8/2.0 + 0.8/1.0) * ns,
		}, Options{ZeroFraction: 0.6, HoleFraction: 0.5}},
		// Probed whole: the read at its own rate, the feed for one child
		// and a stream for the other (the relay tees the pipe to it).
		{"source raw, path probed", fed, Compression{}, "src", map[ConstraintKind]float64{
			CPULimit: (1/1.0 + 2/4.0 + 1/0.5 + 1/1.0) * ns,
		}, Options{}},
		{"source compressed, path probed", fed, Compression{"zstd", 2}, "src", map[ConstraintKind]float64{
			CPULimit: (0.5/1.0 + 0.5/4.0 + 0.5*(1/0.5+1/1.0)) * ns,
		}, Options{}},
		{"source compressed", serial, Compression{"zstd", 2}, "src", map[ConstraintKind]float64{
			DiskLimit:   0.5,
			IOBusLimit:  1.5,
			MemoryLimit: 1.5 + 0.5 + 3,
			CPULimit:    (0.5/2.0 + 0.5/4.0 + 1/2.0 + 1/1.0) * ns,
		}, Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			net := oneSwitch(6, 1250*MB, tt.res)
			tree := NaryTree(6, 2)
			r, err := Evaluate(net, Plan{Tree: tree, Hosts: hostNames(net)[:len(tree.Parent)], Compression: tt.comp}, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			for kind, coef := range tt.want {
				if c := find(t, r, kind, tt.subject); !near(c.Coef, coef) {
					t.Errorf("%s: coef %v, want %v", kind, c.Coef, coef)
				}
			}
			if tt.res.ParallelDecompress && has(r, DecompressLimit, tt.subject) {
				t.Error("parallel decompression should not be held to one core")
			}
			if c := find(t, r, CPULimit, tt.subject); c.Cap != 4 {
				t.Errorf("CPU capacity %v, want 4 cores", c.Cap)
			}
		})
	}
}

func TestDecompressCoreBinds(t *testing.T) {
	res := dollyRes
	res.CPU.Decompress = map[string]float64{"gzip": 50 * MB}
	r := mustEvaluate(t, oneSwitch(3, 1250*MB, res), Chain(3), Compression{"gzip", 3})
	// The thread also copies the payloads in, gathers (copy), scans,
	// digests and copies to the target's aligned chunks.
	want := MB / (1/50.0 + (1/3.0)/2000 + 1/2000.0 + 1/4000.0 + 1/4000.0 + 1/2000.0)
	if !near(r.Rate, want) || r.Binding[0].Kind != DecompressLimit {
		t.Errorf("%v MB/s by %q, want %v MB/s by a decoding thread", r.Rate/MB, r.Bottleneck, want/MB)
	}
	if !strings.HasPrefix(r.Bottleneck, "decoding thread of n01, n02 and n03") {
		t.Errorf("bottleneck %q", r.Bottleneck)
	}
}

func TestUnmodelledResourcesAddNoConstraint(t *testing.T) {
	r := mustEvaluate(t, oneSwitch(2, gbe, Resources{Model: ModelDolly}), Chain(2), Compression{})
	for _, c := range r.Constraints {
		if c.Kind != LinkLimit {
			t.Errorf("unexpected %v from a host with no figures", c)
		}
	}
}

// In a chain every node but the last has one child: the relay's probed
// path, as measured, and the write.
func TestDollyModelRelayInAChain(t *testing.T) {
	res := dollyRes
	res.CPU.Relay = 500 * MB
	net := oneSwitch(3, 1250*MB, res)
	tree := Chain(3)
	r, err := Evaluate(net, Plan{Tree: tree, Hosts: hostNames(net)[:len(tree.Parent)]}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := find(t, r, CPULimit, "n01"); !near(c.Coef, (1/0.5+1/2.0)*1e-9) {
		t.Errorf("n01: cpu coef %v, want %v", c.Coef, (1/0.5+1/2.0)*1e-9)
	}
}
