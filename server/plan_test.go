package server

import (
	"strings"
	"testing"

	"dolly/capacity"
	"dolly/imaging"
)

// crowdedLab is a source and n nodes on one machine of two cores, each
// link of the given speed: a lab of namespaces, or a demo, on one box.
func crowdedLab(n int, link float64) capacity.Network {
	res := capacity.Resources{Model: capacity.ModelDolly, Cores: 2, CPU: capacity.CPURates{
		Net: 8e9, Copy: 14e9, Digest: 20e9, Disk: 8e9,
		Decompress: map[string]float64{"zstd": 3e9}, Compress: map[string]float64{"zstd": 300e6},
	}}
	net := capacity.Network{Switches: []capacity.Switch{{Name: "switch"}}, LinkEfficiency: capacity.TCPEthernetEfficiency}
	for i := 0; i <= n; i++ {
		h := capacity.Host{Name: "pc" + string(rune('a'+i)), Switch: "switch", Link: link, Resources: res, Machine: "box"}
		if i == 0 {
			h.Name, h.Role = "source", capacity.RoleSource
		}
		net.Hosts = append(net.Hosts, h)
	}
	return net
}

// Plans are compared with a crowded machine's CPU at twice its figures' cost:
// the figures leave out what the hosts cost each other. Not when the
// machine's nodes measured that together (a crowd probe).
func TestChooseDoubtsACrowdedMachine(t *testing.T) {
	raw := capacity.Compression{Codec: "zstd", Factor: 1}
	tests := []struct {
		name     string
		nodes    int
		link     float64
		measured bool // the crowd was measured
		wantComp string
		wantNote bool
	}{
		// Gigabit: zstd's CPU-bound prediction is ahead of the raw chain, but
		// not at twice the CPU's cost: the raw chain runs.
		{"gigabit, 8 nodes", 8, 125e6, false, "none", true},
		// Measured together: the model's best runs.
		{"gigabit, 8 nodes, crowd measured", 8, 125e6, true, "zstd", false},
		// Fast Ethernet: zstd is ahead even so, and runs.
		{"fast ethernet, 8 nodes", 8, 12.5e6, false, "zstd", false},
		// One node: the machine is not crowded, the model's best runs.
		{"gigabit, 1 node", 1, 125e6, false, "zstd", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := capacity.Options{Compression: capacity.Compression{Codec: "zstd", Factor: 8}, ImageBytes: 1 << 30,
				Stored: &raw, ZeroFraction: 0.6}
			net := crowdedLab(tt.nodes, tt.link)
			if tt.measured {
				net.Machines = map[string]capacity.Machine{"box": {Crowded: true}}
			}
			ch, err := Choose(net, opt, "", 0, CompressAuto, imaging.Raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := ch.Result.Plan.Compression.Name(); got != tt.wantComp {
				t.Errorf("chose %s, %s (%.0f MB/s); want %s; ranked first: %s, %s at %.0f MB/s", ch.Result.Plan.Name(), got, ch.Result.Rate/1e6,
					tt.wantComp, ch.Ranked[0].Plan.Name(), ch.Ranked[0].Plan.Compression.Name(), ch.Ranked[0].Rate/1e6)
			}
			for _, r := range ch.Ranked[:min(4, len(ch.Ranked))] {
				t.Logf("%s %s %.0f %s", r.Plan.Name(), r.Plan.Compression.Name(), r.Rate/1e6, r.Bottleneck)
			}
			note := strings.Contains(strings.Join(ch.Notes, "\n"), "hosts share on 2 cores")
			if note != tt.wantNote {
				t.Errorf("note about the crowded machine: %v, want %v (notes %q)", note, tt.wantNote, ch.Notes)
			}
		})
	}
}
