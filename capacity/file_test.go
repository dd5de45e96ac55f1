package capacity

import (
	"strings"
	"testing"
	"time"
)

func TestParseTopology(t *testing.T) {
	topo := loadExample(t, "patagonia-fe.json")
	if topo.Name != "patagonia-fe" || len(topo.Network.Hosts) != 6 || len(topo.Network.Switches) != 1 {
		t.Fatalf("parsed %+v", topo)
	}
	server := topo.Network.Hosts[0]
	if server.Role != RoleSource || server.Link != fe || server.Resources.Model != ModelPaper {
		t.Errorf("server %+v", server)
	}
	r := topo.Network.Hosts[1].Resources
	if r.Disk != 24*MB || r.IOBus != 132*MB || r.Memory != 180*MB || r.CPU.Net != 60*MB ||
		r.CPU.Disk != 80*MB || r.CPU.Copy != 90*MB || r.CPU.Decompress["gzip"] != 10*MB {
		t.Errorf("profile resources %+v", r)
	}
	if topo.Network.Switches[0].Backplane != 4e9 {
		t.Errorf("backplane %v", topo.Network.Switches[0].Backplane)
	}
	opt := topo.Options
	if opt.Compression != (Compression{"gzip", 2}) || opt.ImageBytes != 2e9 || opt.FrameBytes != 1<<20 {
		t.Errorf("options %+v", opt)
	}
}

func TestParseTopologyTree(t *testing.T) {
	topo := loadExample(t, "figure5.json")
	p := topo.Tree
	wantHosts := []string{"server", "pc01", "pc02", "pc03", "pc04", "pc05", "pc06", "pc07", "pc08"}
	wantParent := []int{-1, 0, 1, 1, 2, 2, 3, 4, 5}
	for v := range wantHosts {
		if p.Hosts[v] != wantHosts[v] || p.Tree.Parent[v] != wantParent[v] {
			t.Fatalf("tree %v over %v, want %v over %v", p.Tree.Parent, p.Hosts, wantParent, wantHosts)
		}
	}
	if p.Tree.Fanout != 2 || p.Tree.Kind != KindExplicit {
		t.Errorf("tree %+v", p.Tree)
	}
}

// topologyWith returns a small valid topology file with extra appended to
// its fields, or with its hosts replaced.
func topologyWith(hosts, extra string) string {
	if hosts == "" {
		hosts = `{"name": "s", "switch": "sw", "link": "1Gbit", "role": "source", "profile": "p"},
		         {"name": "a", "switch": "sw", "link": "1Gbit", "profile": "p"}`
	}
	return `{"switches": [{"name": "sw"}],
	         "profiles": {"p": {"model": "basic", "switching": "30MB/s"}},
	         "hosts": [` + hosts + `]` + extra + `}`
}

func TestParseTopologyOptions(t *testing.T) {
	topo, err := ParseTopology([]byte(topologyWith("", `, "startup": "2s", "max_fanout": 3, "frame_size": 65536`)))
	if err != nil {
		t.Fatal(err)
	}
	if topo.Options.Startup != 2*time.Second || topo.Options.MaxFanout != 3 || topo.Options.FrameBytes != 65536 {
		t.Errorf("options %+v", topo.Options)
	}
	topo, err = ParseTopology([]byte(topologyWith("", `, "startup": 0.25`)))
	if err != nil || topo.Options.Startup != 250*time.Millisecond {
		t.Errorf("startup in seconds: %v, %v", topo, err)
	}
}

func TestParseTopologyHostResources(t *testing.T) {
	hosts := `{"name": "s", "switch": "sw", "link": 125000000, "role": "source",
	           "resources": {"model": "paper", "disk": "24MB/s", "cpu": {"net": "60MB/s"}}},
	          {"name": "a", "switch": "sw", "probe": {"hostname": "a", "nic_bytes_per_sec": 1.25e9,
	           "disk_write_bytes_per_sec": 5e8, "memcpy_bytes_per_sec": 1e10, "cores": 8}},
	          {"name": "b", "switch": "sw", "link": "10Gbit"}`
	topo, err := ParseTopology([]byte(topologyWith(hosts, "")))
	if err != nil {
		t.Fatal(err)
	}
	h := topo.Network.Hosts
	if h[0].Link != gbe || h[0].Resources.Model != ModelPaper || h[0].Resources.CPU.Net != 60*MB {
		t.Errorf("inline resources: %+v", h[0])
	}
	if h[1].Link != 1.25e9 || h[1].Resources.Model != ModelDolly || h[1].Resources.Cores != 8 || h[1].Resources.Disk != 5e8 {
		t.Errorf("probe resources: %+v", h[1])
	}
	if h[2].Role != RoleNode || h[2].Resources.Model != "" {
		t.Errorf("host without resources: %+v", h[2])
	}
	if _, err := topo.Rank(); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("ranking with a host of no model: %v, want an error naming it", err)
	}
}

func TestParseTopologyErrors(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"not json", `{`, "topology"},
		{"unknown field", topologyWith("", `, "switchez": []`), `unknown field "switchez"`},
		{"bad unit", strings.Replace(topologyWith("", ""), "30MB/s", "30 furlongs", 1), `unknown unit "furlongs"`},
		{"unknown profile", topologyWith(`{"name": "s", "switch": "sw", "link": "1Gbit", "profile": "q"}`, ""), `unknown profile "q"`},
		{"two resource sources", topologyWith(`{"name": "s", "switch": "sw", "link": "1Gbit", "profile": "p", "resources": {}}`, ""), "one of profile"},
		{"compression without codec", topologyWith("", `, "compression": {"factor": 2}`), "give the codec"},
		{"compression below 1", topologyWith("", `, "compression": {"codec": "gzip", "factor": 0.5}`), "below 1"},
		{"bad startup", topologyWith("", `, "startup": "soon"`), "duration"},
		{"size with /s", topologyWith("", `, "image_size": "2GB/s"`), `no "/s"`},
		{"tree missing a node", topologyWith("", `, "tree": {"a": "s", "x": "s"}`), `unknown host "x"`},
		{"tree node without parent", topologyWith(`{"name": "s", "switch": "sw", "link": 1, "role": "source", "profile": "p"},
			{"name": "a", "switch": "sw", "link": 1, "profile": "p"}, {"name": "b", "switch": "sw", "link": 1, "profile": "p"}`,
			`, "tree": {"a": "s"}`), "node b has no parent"},
		{"tree cycle", topologyWith(`{"name": "s", "switch": "sw", "link": 1, "role": "source", "profile": "p"},
			{"name": "a", "switch": "sw", "link": 1, "profile": "p"}, {"name": "b", "switch": "sw", "link": 1, "profile": "p"}`,
			`, "tree": {"a": "b", "b": "a"}`), "cycle"},
		{"tree parent unknown", topologyWith("", `, "tree": {"a": "zz"}`), `unknown parent "zz"`},
		{"tree source with parent", topologyWith("", `, "tree": {"a": "s", "s": "a"}`), "cannot have a parent"},
		{"machine without hosts", topologyWith("", `, "machines": {"box": {"contention": 0.1}}`), "machine box: no host runs on it"},
		{"negative contention", topologyWith(`{"name": "s", "switch": "sw", "link": 1, "role": "source", "profile": "p", "machine": "box"}`,
			`, "machines": {"box": {"contention": -0.1}}`), "contention -0.1"},
		{"contention above 1", topologyWith(`{"name": "s", "switch": "sw", "link": 1, "role": "source", "profile": "p", "machine": "box"}`,
			`, "machines": {"box": {"contention": 1.5}}`), "want a share from 0 to 1"},
		{"negative cast cost", topologyWith(`{"name": "s", "switch": "sw", "link": 1, "role": "source", "profile": "p", "machine": "box"}`,
			`, "machines": {"box": {"cast_cpu_per_gb": -2}}`), "cast_cpu_per_gb -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestReadTopology(t *testing.T) {
	topo, err := ReadTopology(strings.NewReader(topologyWith("", "")))
	if err != nil {
		t.Fatal(err)
	}
	results, err := topo.Rank()
	if err != nil {
		t.Fatal(err)
	}
	// One node: the only candidate is a chain of one. The source is an
	// N(1,1,1) node as in the paper: (1+1+1)·b ≤ 30.
	if len(results) != 1 || !near(results[0].Rate, 10*MB) {
		t.Errorf("results %+v", results)
	}
}
