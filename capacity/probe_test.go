package capacity

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestProbeJSON(t *testing.T) {
	data := []byte(`{
		"hostname": "pc07",
		"nic_bytes_per_sec": 125000000,
		"disk_write_bytes_per_sec": 200000000,
		"memcpy_bytes_per_sec": 8000000000,
		"decompress_bytes_per_sec": {"zstd": 900000000, "gzip": 300000000},
		"digest_bytes_per_sec": 12000000000,
		"cores": 4
	}`)
	var p Probe
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	want := Probe{Hostname: "pc07", NICBytesPerSec: 125e6, DiskWriteBytesPerSec: 200e6, MemcpyBytesPerSec: 8e9,
		DecompressBytesPerSec: map[string]float64{"zstd": 900e6, "gzip": 300e6}, DigestBytesPerSec: 12e9, Cores: 4}
	if p.Hostname != want.Hostname || p.NICBytesPerSec != want.NICBytesPerSec || p.DiskWriteBytesPerSec != want.DiskWriteBytesPerSec ||
		p.MemcpyBytesPerSec != want.MemcpyBytesPerSec || p.DigestBytesPerSec != want.DigestBytesPerSec || p.Cores != want.Cores ||
		p.DecompressBytesPerSec["zstd"] != 900e6 || p.DecompressBytesPerSec["gzip"] != 300e6 {
		t.Errorf("decoded %+v, want %+v", p, want)
	}
}

func TestProbeResources(t *testing.T) {
	p := Probe{Hostname: "pc07", NICBytesPerSec: 125e6, DiskWriteBytesPerSec: 200e6, DiskReadBytesPerSec: 500e6,
		MemcpyBytesPerSec: 8e9, DecompressBytesPerSec: map[string]float64{"zstd": 900e6}, DigestBytesPerSec: 12e9}
	r := p.Resources(RoleNode)
	if r.Model != ModelDolly || r.Disk != 200e6 || r.Memory != 16e9 || r.Cores != 1 || r.ParallelDecompress ||
		r.CPU.Copy != 8e9 || r.CPU.Net != 8e9*NetStreamCopyRatio || r.CPU.Digest != 12e9 || r.CPU.Decompress["zstd"] != 900e6 {
		t.Errorf("node resources %+v", r)
	}
	if src := p.Resources(RoleSource); src.Disk != 500e6 {
		t.Errorf("the source's disk is its read rate, got %v", src.Disk)
	}
	p.NetStreamBytesPerSec = 3e9
	if r := p.Resources(RoleNode); r.CPU.Net != 3e9 {
		t.Errorf("a calibrated network rate should win, got %v", r.CPU.Net)
	}
	r.CPU.Decompress["zstd"] = 1
	if p.DecompressBytesPerSec["zstd"] != 900e6 {
		t.Error("resources share the probe's map")
	}
}

func TestSingleSwitch(t *testing.T) {
	probe := func(name string, nic float64) Probe {
		return Probe{Hostname: name, NICBytesPerSec: nic, DiskWriteBytesPerSec: 150e6,
			MemcpyBytesPerSec: 5e9, DigestBytesPerSec: 10e9, Cores: 4}
	}
	net := SingleSwitch(probe("server", 1.25e9), []Probe{probe("a", 125e6), probe("", 125e6), probe("c", 12.5e6)})
	if got := hostNames(net); !slices.Equal(got, []string{"server", "a", "node2", "c"}) {
		t.Errorf("hosts %v", got)
	}
	if net.Hosts[0].Role != RoleSource || net.Hosts[1].Role != RoleNode || net.Hosts[3].Link != 12.5e6 {
		t.Errorf("hosts %+v", net.Hosts)
	}
	results, err := Rank(net, Options{ImageBytes: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	// The Fast Ethernet node c bounds every plan: its link carries one stream.
	for _, r := range results {
		if r.Rate > 12.5e6*(1+1e-9) {
			t.Errorf("%s at %v MB/s beats c's 12.5 MB/s link", r.Plan.Name(), r.Rate/MB)
		}
	}
	if results[0].Plan.Hosts[len(results[0].Plan.Hosts)-1] != "c" {
		t.Errorf("the slow host should come last: %v", results[0].Plan.Hosts)
	}
}

func TestApplyProbes(t *testing.T) {
	net := Network{
		Switches: []Switch{{Name: "sw"}},
		Hosts: []Host{
			{Name: "server", Switch: "sw", Role: RoleSource},
			{Name: "a", Switch: "sw", Link: 12.5e6},
			{Name: "b", Switch: "sw", Link: 125e6, Resources: patagonia},
		},
	}
	unknown := net.ApplyProbes([]Probe{
		{Hostname: "server", NICBytesPerSec: 1.25e9, DiskReadBytesPerSec: 7e8},
		{Hostname: "a", NICBytesPerSec: 125e6, DiskWriteBytesPerSec: 3e8},
		{Hostname: "b", NICBytesPerSec: 1.25e9},
		{Hostname: "zz"},
	})
	if !slices.Equal(unknown, []string{"zz"}) {
		t.Errorf("unknown %v", unknown)
	}
	h := net.Hosts
	if h[0].Link != 1.25e9 || h[0].Resources.Disk != 7e8 || h[0].Resources.Model != ModelDolly {
		t.Errorf("server %+v", h[0])
	}
	if h[1].Link != 12.5e6 || h[1].Resources.Disk != 3e8 {
		t.Errorf("a keeps its file link and gets the probed disk: %+v", h[1])
	}
	if h[2].Resources.Model != ModelPaper || h[2].Link != 125e6 {
		t.Errorf("b keeps the file's figures: %+v", h[2])
	}
}
