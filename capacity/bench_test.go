package capacity

import (
	"fmt"
	"testing"
)

// labNetwork builds n dolly nodes on 24-port edge switches joined by a
// core switch, as a large lab would be cabled.
func labNetwork(n int) Network {
	probe := Probe{NICBytesPerSec: 125e6, DiskWriteBytesPerSec: 180e6, MemcpyBytesPerSec: 6e9,
		DecompressBytesPerSec: map[string]float64{"zstd": 800e6, "gzip": 250e6}, DigestBytesPerSec: 10e9, Cores: 4}
	net := Network{Switches: []Switch{{Name: "core", Backplane: 640e9}}}
	source := probe
	source.NICBytesPerSec = 1.25e9
	source.DiskReadBytesPerSec = 2e9
	net.Hosts = append(net.Hosts, Host{Name: "server", Switch: "core", Link: 1.25e9, Role: RoleSource,
		Resources: source.Resources(RoleSource)})
	for i := range n {
		edge := fmt.Sprintf("edge%02d", i/24)
		if i%24 == 0 {
			net.Switches = append(net.Switches, Switch{Name: edge, Backplane: 48e9})
			net.Links = append(net.Links, SwitchLink{A: "core", B: edge, Capacity: 1.25e9})
		}
		net.Hosts = append(net.Hosts, Host{Name: fmt.Sprintf("pc%04d", i+1), Switch: edge, Link: 125e6,
			Resources: probe.Resources(RoleNode)})
	}
	return net
}

// BenchmarkPlan1000 ranks every candidate plan, raw and compressed, for
// 1,000 nodes; the server does this before every cast.
func BenchmarkPlan1000(b *testing.B) {
	net := labNetwork(1000)
	opt := Options{Compression: Compression{Codec: "zstd", Factor: 2.5}, ImageBytes: 20e9}
	for b.Loop() {
		if _, err := Rank(net, opt); err != nil {
			b.Fatal(err)
		}
	}
	// The goal: under 100 ms per plan. Below 1 means within budget.
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perOp/0.100, "of-100ms-budget")
}
