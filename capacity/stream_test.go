package capacity

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func evaluateWith(t *testing.T, net Network, tree Tree, comp Compression, opt Options) Result {
	t.Helper()
	r, err := Evaluate(net, Plan{Tree: tree, Hosts: hostNames(net)[:len(tree.Parent)], Compression: comp}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Zero runs are not sent: a half-empty raw image crosses a link in half
// the bytes, so the link allows twice the rate in image bytes.
func TestZeroRunsAreNotSent(t *testing.T) {
	fast := Resources{Model: ModelDolly, CPU: CPURates{Decompress: map[string]float64{"zstd": 1e15}}}
	net := oneSwitch(3, 12.5*MB, fast)
	full := evaluateWith(t, net, Chain(3), Compression{}, Options{})
	half := evaluateWith(t, net, Chain(3), Compression{}, Options{ZeroFraction: 0.5})
	if !near(full.Rate, 12.5*MB) || !near(half.Rate, 25*MB) {
		t.Fatalf("rates %v and %v MB/s, want 12.5 and 25", full.Rate/MB, half.Rate/MB)
	}
	// A compressed stream already leaves the zeros out in its factor.
	comp := evaluateWith(t, net, Chain(3), Compression{"zstd", 4}, Options{ZeroFraction: 0.5})
	if comp.Rate < 49.99*MB || comp.Rate > 50*MB {
		t.Fatalf("compressed rate %v MB/s, want 50", comp.Rate/MB)
	}
	if _, err := Evaluate(net, Plan{Tree: Chain(3), Hosts: hostNames(net)}, Options{ZeroFraction: 1}); err == nil {
		t.Fatal("a zero fraction of 1 was accepted")
	}
}

func TestZeroRunsCostTheNodeNothing(t *testing.T) {
	res := dollyRes
	net := oneSwitch(2, 1250*MB, res)
	r := evaluateWith(t, net, Chain(2), Compression{}, Options{ZeroFraction: 0.75})
	disk := find(t, r, DiskLimit, "n01")
	if !near(disk.Coef, 0.25) {
		t.Errorf("disk coefficient %v, want 0.25: only data is written", disk.Coef)
	}
	cpu := find(t, r, CPULimit, "n01")
	const ns = 1e-9
	want := (2*0.25/1.0 + 0.25/2.0 + 0.25/4.0 + 0.25/2.0) * ns
	if !near(cpu.Coef, want) {
		t.Errorf("CPU coefficient %v, want %v", cpu.Coef, want)
	}
}

// The zero runs a node zeroes cost its disk a write only where the disk
// zeroes by writing zeros; those in free blocks (not zeroed) never do.
func TestZeroedRunsCostADiskThatZeroesByWriting(t *testing.T) {
	cases := []struct {
		name      string
		byWriting bool
		zeroed    float64
		comp      Compression
		want      float64 // the disk's coefficient
	}{
		{"zeroes in place", false, 0.5, Compression{}, 0.25},
		{"zeroes by writing, all zero runs zeroed", true, 0.75, Compression{}, 1},
		{"zeroes by writing, free blocks left", true, 0.25, Compression{}, 0.5},
		{"zeroes by writing, a compressed stream", true, 0.75, Compression{"zstd", 4}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := dollyRes
			res.ZeroesByWriting = c.byWriting
			res.CPU.Decompress = map[string]float64{"zstd": 1e15}
			net := oneSwitch(2, 1250*MB, res)
			r := evaluateWith(t, net, Chain(2), c.comp, Options{ZeroFraction: 0.75, ZeroedFraction: c.zeroed})
			if disk := find(t, r, DiskLimit, "n01"); !near(disk.Coef, c.want) {
				t.Errorf("disk coefficient %v, want %v", disk.Coef, c.want)
			}
		})
	}
	net := oneSwitch(2, 1250*MB, dollyRes)
	if _, err := Evaluate(net, Plan{Tree: Chain(2), Hosts: hostNames(net)}, Options{ZeroFraction: 0.5, ZeroedFraction: 0.6}); err == nil {
		t.Fatal("more zeroed than in zero runs was accepted")
	}
}

// A raw image sent compressed is compressed by the source, which costs it
// CPU; a compressed image sent raw is decoded there, on one core.
func TestSourceConversions(t *testing.T) {
	res := dollyRes
	res.CPU.Compress = map[string]float64{"zstd": 100 * MB}
	net := oneSwitch(2, 1250*MB, res)
	raw := Compression{}
	zstd := Compression{Codec: "zstd", Factor: 2}

	onTheFly := evaluateWith(t, net, Chain(2), zstd, Options{Stored: &raw})
	cpu := find(t, onTheFly, CPULimit, "src")
	const ns = 1e-9
	// read 1, digest 1 + CRC 0.5 passes, compress 1 at 0.1 GB/s, one child 0.5 copy + stream
	want := (1/2.0 + 1.5/4.0 + 1/0.1 + 0.5/2.0 + 0.5/1.0) * ns
	if !near(cpu.Coef, want) {
		t.Errorf("compressing source CPU coefficient %v, want %v", cpu.Coef, want)
	}
	if disk := find(t, onTheFly, DiskLimit, "src"); !near(disk.Coef, 1) {
		t.Errorf("compressing source reads %v per raw byte, want 1", disk.Coef)
	}
	// A sparse image's holes (and the blocks its map leaves out) come off
	// no disk, though the compressor takes them.
	sparse := evaluateWith(t, net, Chain(2), zstd, Options{Stored: &raw, ZeroFraction: 0.7, HoleFraction: 0.6})
	if disk := find(t, sparse, DiskLimit, "src"); !near(disk.Coef, 0.4) {
		t.Errorf("compressing source of an image 60%% holes reads %v per raw byte, want 0.4", disk.Coef)
	}
	dense := evaluateWith(t, net, Chain(2), zstd, Options{Stored: &raw, ZeroFraction: 0.7})
	if thread, full := find(t, sparse, CompressLimit, "src"), find(t, dense, CompressLimit, "src"); !near(thread.Coef, full.Coef) {
		t.Errorf("compressing thread of an image 60%% holes: %v, want %v as for one without holes", thread.Coef, full.Coef)
	}
	// One thread reads, digests and compresses, however many cores the
	// source has: read 1, digest 1, compress 1 at 0.1 GB/s, on one core.
	thread := find(t, onTheFly, CompressLimit, "src")
	if want := (1/2.0 + 1/4.0 + 1/0.1) * ns; !near(thread.Coef, want) || thread.Cap != 1 {
		t.Errorf("compressing thread: %v·b ≤ %v, want %v·b ≤ 1", thread.Coef, thread.Cap, want)
	}
	if got := describeGroup(thread, []string{"src"}); got != "compressing thread of src" {
		t.Errorf("compressing thread described as %q", got)
	}
	// A source that compresses chunks apart on 4 threads may use 4 cores
	// for it; the machine's CPU still bounds them all.
	threaded := net
	threaded.Hosts = slices.Clone(net.Hosts)
	threaded.Hosts[0].Resources.CompressThreads = 4
	four := find(t, evaluateWith(t, threaded, Chain(2), zstd, Options{Stored: &raw}), CompressLimit, "src")
	if !near(four.Coef, thread.Coef) || four.Cap != 4 {
		t.Errorf("4 compressing threads: %v·b ≤ %v, want %v·b ≤ 4", four.Coef, four.Cap, thread.Coef)
	}
	if got := describeGroup(four, []string{"src"}); got != "4 compressing threads of src" {
		t.Errorf("4 compressing threads described as %q", got)
	}

	// With the read through the page cache probed (1 GB/s a core), the
	// thread and the source's CPU read at that cost rather than a copy's.
	probed := net
	probed.Hosts = slices.Clone(net.Hosts)
	probed.Hosts[0].Resources.CPU.Read = 1000 * MB
	read := evaluateWith(t, probed, Chain(2), zstd, Options{Stored: &raw})
	if got, want := find(t, read, CompressLimit, "src").Coef, (1/1.0+1/4.0+1/0.1)*ns; !near(got, want) {
		t.Errorf("compressing thread with a probed read: %v, want %v", got, want)
	}
	if got, want := find(t, read, CPULimit, "src").Coef, (1/1.0+1.5/4.0+1/0.1+0.5/2.0+0.5/1.0)*ns; !near(got, want) {
		t.Errorf("compressing source with a probed read: CPU %v, want %v", got, want)
	}

	decoded := evaluateWith(t, net, Chain(2), raw, Options{Stored: &zstd})
	if disk := find(t, decoded, DiskLimit, "src"); !near(disk.Coef, 0.5) {
		t.Errorf("decoding source reads %v per raw byte, want 0.5", disk.Coef)
	}
	if dec := find(t, decoded, DecompressLimit, "src"); !near(dec.Coef, 1/(1000*MB)) {
		t.Errorf("decoding source core coefficient %v", dec.Coef)
	}

	// Without a compression rate the plan cannot be judged.
	res.CPU.Compress = nil
	if _, err := Evaluate(oneSwitch(2, 1250*MB, res), Plan{Tree: Chain(2), Hosts: []string{"src", "n01", "n02"}, Compression: zstd}, Options{Stored: &raw}); err == nil {
		t.Fatal("a plan compressing at the source without a compression rate was evaluated")
	}
}

func TestLinkEfficiency(t *testing.T) {
	net := oneSwitch(2, 12.5*MB, Resources{Model: ModelDolly})
	net.LinkEfficiency = TCPEthernetEfficiency
	r := evaluateWith(t, net, Chain(2), Compression{}, Options{})
	if !near(r.Rate, 12.5*MB*1448/1538) {
		t.Fatalf("rate %v MB/s, want %v", r.Rate/MB, 12.5*1448/1538)
	}
}

// A host whose link speed is not known (loopback, a virtual NIC) adds no
// link constraint; its other limits still count.
func TestUnknownLinkIsNotModelled(t *testing.T) {
	net := oneSwitch(2, 0, dollyRes)
	r := evaluateWith(t, net, Chain(2), Compression{}, Options{})
	for _, c := range r.Constraints {
		if c.Kind == LinkLimit {
			t.Fatalf("a link constraint without a capacity: %v", c)
		}
	}
	if r.Binding[0].Kind == LinkLimit || r.Rate <= 0 {
		t.Fatalf("rate %v MB/s bound by %s", r.Rate/MB, r.Bottleneck)
	}
}

// Hosts on one machine share its CPU: four relays that each need a third of
// a core cannot all run on a two-core machine at full rate.
func TestSharedMachine(t *testing.T) {
	res := Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{Net: 100 * MB, Copy: 1000 * MB, Digest: 1000 * MB}}
	apart := oneSwitch(4, 1250*MB, res)
	shared := oneSwitch(4, 1250*MB, res)
	for i := range shared.Hosts {
		shared.Hosts[i].Machine = "box"
	}
	a := evaluateWith(t, apart, Chain(4), Compression{}, Options{})
	s := evaluateWith(t, shared, Chain(4), Compression{}, Options{})
	if s.Rate >= a.Rate {
		t.Fatalf("shared machine %v MB/s, apart %v MB/s: sharing must cost", s.Rate/MB, a.Rate/MB)
	}
	c := find(t, s, MachineCPULimit, "box")
	var sum float64
	for _, h := range s.Constraints {
		if h.Kind == CPULimit {
			sum += h.Coef
		}
	}
	if !near(c.Coef, sum) || c.Cap != 2 || c.Streams != 5 {
		t.Fatalf("machine constraint %+v, want the sum %v of 5 hosts on 2 cores", c, sum)
	}
	if s.Bottleneck != "CPU of machine box, shared by 5 hosts" {
		t.Fatalf("bottleneck %q", s.Bottleneck)
	}
}

// Contention makes every host on a shared machine dearer by a share for
// each other host of the cast on it, in the plan or beside it (nodes served
// apart), so the machine's coefficient grows faster than the number of
// hosts.
func TestMachineContention(t *testing.T) {
	res := Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{Net: 100 * MB, Copy: 1000 * MB, Digest: 1000 * MB}}
	tests := []struct {
		nodes      int
		contention float64
		beside     int
	}{{1, 0, 0}, {4, 0, 0}, {4, 0.05, 0}, {8, 0.05, 0}, {8, 0.2, 0}, {4, 0.2, 0}, {4, 0.2, 4}, {1, 0.2, 8}}
	for _, tt := range tests {
		net := oneSwitch(tt.nodes, 1250*MB, res)
		for i := range net.Hosts {
			net.Hosts[i].Machine = "box"
		}
		plain := find(t, evaluateWith(t, net, Chain(tt.nodes), Compression{}, Options{}), MachineCPULimit, "box")
		net.Machines = map[string]Machine{"box": {Contention: tt.contention, Beside: tt.beside}}
		r := evaluateWith(t, net, Chain(tt.nodes), Compression{}, Options{})
		c := find(t, r, MachineCPULimit, "box")
		want := plain.Coef * (1 + tt.contention*float64(tt.nodes+tt.beside))
		if !near(c.Coef, want) {
			t.Errorf("%d nodes, %d beside, contention %v: coefficient %v, want %v", tt.nodes, tt.beside, tt.contention, c.Coef, want)
		}
		if want := tt.nodes + 1 + tt.beside; c.Streams != want {
			t.Errorf("%d nodes, %d beside: the machine is shared by %d hosts, want %d", tt.nodes, tt.beside, c.Streams, want)
		}
	}
}

// A machine whose cores are busy only part of the time counts all its
// hosts' work, their decoding threads' too, at the reciprocal of that
// share.
func TestMachineBusyShare(t *testing.T) {
	res := Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{Net: 100 * MB, Copy: 1000 * MB, Digest: 1000 * MB,
		Decompress: map[string]float64{"zstd": 200 * MB}}}
	zstd := Compression{Codec: "zstd", Factor: 4}
	tests := []struct {
		comp       Compression
		share      float64
		contention float64
		cast       float64
	}{{Compression{}, 0, 0, 0}, {Compression{}, 1, 0, 0}, {Compression{}, 0.8, 0, 0}, {Compression{}, 0.5, 0, 0},
		{zstd, 0, 0, 0}, {zstd, 0.8, 0, 0}, {zstd, 0.5, 0, 0}, {zstd, 0.8, 0.1, 2e-9}, {Compression{}, 0.8, 0.2, 1e-9}}
	for _, tt := range tests {
		net := oneSwitch(4, 1250*MB, res)
		for i := range net.Hosts {
			net.Hosts[i].Machine = "box"
		}
		r := evaluateWith(t, net, Chain(4), tt.comp, Options{})
		plain := find(t, r, MachineCPULimit, "box")
		net.Machines = map[string]Machine{"box": {BusyShare: tt.share, Contention: tt.contention, CastCost: tt.cast}}
		c := find(t, evaluateWith(t, net, Chain(4), tt.comp, Options{}), MachineCPULimit, "box")
		work := plain.Coef
		if tt.share > 0 {
			work = plain.Coef / tt.share
		}
		// The cast cost is the machine's own, not its hosts' work.
		want := work*(1+tt.contention*4) + tt.cast*wireShare(tt.comp)
		if !near(c.Coef, want) {
			t.Errorf("%v, share %v, contention %v, cast %v: coefficient %v, want %v", tt.comp, tt.share, tt.contention, tt.cast, c.Coef, want)
		}
		if c.Cap != plain.Cap {
			t.Errorf("%v, share %v: %v cores, want %v", tt.comp, tt.share, c.Cap, plain.Cap)
		}
	}
}

// wireShare is the bytes on the wire per raw byte.
func wireShare(c Compression) float64 {
	if c.Enabled() {
		return 1 / c.Factor
	}
	return 1
}

// The cast cost adds the same to the machine's coefficient whatever the
// number of hosts, per byte on the wire: a compressed stream pays it on
// its compressed bytes.
func TestMachineCastCost(t *testing.T) {
	res := Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{Net: 100 * MB, Copy: 1000 * MB, Digest: 1000 * MB,
		Decompress: map[string]float64{"zstd": 500 * MB}}}
	const cast = 2e-9 // 2 CPU-seconds per GB sent
	tests := []struct {
		nodes int
		comp  Compression
		wire  float64
	}{{1, Compression{}, 1}, {4, Compression{}, 1}, {8, Compression{}, 1}, {4, Compression{Codec: "zstd", Factor: 4}, 0.25}}
	for _, tt := range tests {
		net := oneSwitch(tt.nodes, 1250*MB, res)
		for i := range net.Hosts {
			net.Hosts[i].Machine = "box"
		}
		plain := find(t, evaluateWith(t, net, Chain(tt.nodes), tt.comp, Options{}), MachineCPULimit, "box")
		net.Machines = map[string]Machine{"box": {Contention: 0.1, CastCost: cast}}
		c := find(t, evaluateWith(t, net, Chain(tt.nodes), tt.comp, Options{}), MachineCPULimit, "box")
		want := plain.Coef*(1+0.1*float64(tt.nodes)) + cast*tt.wire
		if !near(c.Coef, want) {
			t.Errorf("%d nodes, %v: coefficient %v, want %v", tt.nodes, tt.comp, c.Coef, want)
		}
	}
}

// A machine's figures are checked where the model takes them, not only
// in a topology file.
func TestMachineFiguresChecked(t *testing.T) {
	tests := []struct {
		m    Machine
		want string
	}{
		{Machine{Contention: -0.5}, "machine box: contention -0.5"},
		{Machine{CastCost: -1e-9}, "machine box: cast cost -1e-09"},
		{Machine{Beside: -1}, "machine box: -1 hosts beside the plan"},
		{Machine{BusyShare: 1.2}, "machine box: busy share 1.2"},
		{Machine{BusyShare: -0.1}, "machine box: busy share -0.1"},
		{Machine{BusyShare: math.NaN()}, "machine box: busy share NaN"},
	}
	for _, tt := range tests {
		net := oneSwitch(2, 1250*MB, Resources{Model: ModelDolly, Cores: 2, CPU: CPURates{Net: 100 * MB}})
		net.Machines = map[string]Machine{"box": tt.m}
		_, err := Evaluate(net, Plan{Tree: Chain(2), Hosts: hostNames(net)}, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want %q", tt.m, err, tt.want)
		}
	}
}

func TestParseMachines(t *testing.T) {
	data := topologyWith(`{"name": "s", "switch": "sw", "link": 1, "role": "source", "profile": "p", "machine": "box"},
		{"name": "a", "switch": "sw", "link": 1, "profile": "p", "machine": "box"}`, `, "machines": {"box": {"contention": 0.04, "cast_cpu_per_gb": 2.5}}`)
	topo, err := ParseTopology([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := topo.Network.Machines["box"], (Machine{Contention: 0.04, CastCost: 2.5e-9}); !near(got.Contention, want.Contention) || !near(got.CastCost, want.CastCost) {
		t.Fatalf("machine %+v, want %+v", got, want)
	}
}

// Hosts of a machine that write to one disk share its rate: with
// SharedDisk the chain of n runs at the disk's rate over n; without, each
// host has the disk to itself. The source's image read is not a target's
// write and does not count against it.
func TestMachineSharedDisk(t *testing.T) {
	res := Resources{Model: ModelDolly, Cores: 64, Disk: 300 * MB, CPU: CPURates{Net: 100e3 * MB, Copy: 100e3 * MB, Digest: 100e3 * MB}}
	for _, tt := range []struct {
		nodes  int
		shared bool
		crowd  float64 // the disk's rate measured with all writing at once
		want   float64
	}{
		{1, true, 0, 300 * MB}, {4, false, 0, 300 * MB}, {4, true, 0, 75 * MB}, {6, true, 0, 50 * MB},
		// A crowd's figure is the shared disk's, above or below one writer's.
		{4, true, 600 * MB, 150 * MB}, {6, true, 120 * MB, 20 * MB},
		{4, false, 120 * MB, 300 * MB}, // not shared: no crowd figure applies
	} {
		net := oneSwitch(tt.nodes, 125e3*MB, res)
		for i := range net.Hosts {
			net.Hosts[i].Machine = "box"
		}
		net.Machines = map[string]Machine{"box": {SharedDisk: tt.shared, DiskBytesPerSec: tt.crowd}}
		r := mustEvaluate(t, net, Chain(tt.nodes), Compression{})
		if !near(r.Rate, tt.want) {
			t.Errorf("%d nodes, shared disk %v: %.1f MB/s, want %.1f", tt.nodes, tt.shared, r.Rate/MB, tt.want/MB)
		}
		if got := has(r, MachineDiskLimit, "box"); got != (tt.shared && tt.nodes > 1) {
			t.Errorf("%d nodes, shared disk %v: machine disk limit %v", tt.nodes, tt.shared, got)
		}
	}
}

// A node writing its target with O_DIRECT decodes a stream compressed on
// the fly frame by frame into the buffers it writes from: its decoding
// thread does not copy the data into them. Of a stored zstd image, only
// its frames of a chunk or less are decoded so (a captured image's); a
// node writing through the page cache pays the copy all the same.
func TestDirectWritesSpareTheCopyOfFramesDecodedWhole(t *testing.T) {
	const ns = 1e-9
	raw := Compression{}
	zstd := Compression{Codec: "zstd", Factor: 2}
	res := dollyRes
	res.CPU.Compress = map[string]float64{"zstd": 100 * MB}
	copyCost := 0.5 / 2.0 * ns // half the image is data, copied at 2 GB/s
	cases := []struct {
		name   string
		direct bool
		stored Compression
		whole  float64 // of the stored image, in frames decoded whole
		saved  float64
	}{
		{"compressed on the fly, written with O_DIRECT", true, raw, 0, copyCost},
		{"compressed on the fly, written through the page cache", false, raw, 0, 0},
		{"stored zstd in large frames, written with O_DIRECT", true, zstd, 0, 0},
		{"stored zstd in chunks, written with O_DIRECT", true, zstd, 0.5, copyCost},
		{"stored zstd, half its data in chunks, written with O_DIRECT", true, zstd, 0.25, copyCost / 2},
		{"stored zstd in chunks, written through the page cache", false, zstd, 0.5, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			thread := func(direct bool) float64 {
				r := res
				r.DirectWrites = direct
				got := evaluateWith(t, oneSwitch(2, 1250*MB, r), Chain(2), zstd, Options{Stored: &c.stored, ZeroFraction: 0.5, WholeFraction: c.whole})
				return find(t, got, DecompressLimit, "n01").Coef
			}
			if saved := thread(false) - thread(c.direct); !near(saved, c.saved) {
				t.Errorf("the decoding thread spends %v s/B less, want %v", saved, c.saved)
			}
		})
	}
}
