package capacity

import (
	"strings"
	"testing"
)

// threeSwitches is sw1 – sw2 – sw3 in a line: the source on sw1, c on
// sw2, a and b on sw3.
func threeSwitches(trunk float64) Network {
	res := Resources{Model: ModelBasic}
	return Network{
		Switches: []Switch{{Name: "sw1"}, {Name: "sw2"}, {Name: "sw3"}},
		Links: []SwitchLink{
			{A: "sw1", B: "sw2", Capacity: trunk},
			{A: "sw2", B: "sw3", Capacity: trunk},
		},
		Hosts: []Host{
			{Name: "src", Switch: "sw1", Link: gbe, Role: RoleSource, Resources: res},
			{Name: "a", Switch: "sw3", Link: gbe, Resources: res},
			{Name: "b", Switch: "sw3", Link: gbe, Resources: res},
			{Name: "c", Switch: "sw2", Link: gbe, Resources: res},
		},
	}
}

func TestLinkSharingAcrossSwitches(t *testing.T) {
	tests := []struct {
		name    string
		parent  []int          // over src, a, b, c
		streams map[string]int // channels per trunk direction; absent means none
		switchs map[string]int // streams through each switch
		binding string         // expected bottleneck with 30 MB/s trunks
		rate    float64        // MB/s
	}{
		{
			name:    "star",
			parent:  []int{-1, 0, 0, 0},
			streams: map[string]int{"sw1→sw2": 3, "sw2→sw3": 2},
			switchs: map[string]int{"sw1": 3, "sw2": 3, "sw3": 2},
			binding: "link sw1→sw2 shared by 3 channels",
			rate:    10,
		},
		{
			name:    "chain src→a→b→c comes back over sw3→sw2",
			parent:  []int{-1, 0, 1, 2},
			streams: map[string]int{"sw1→sw2": 1, "sw2→sw3": 1, "sw3→sw2": 1},
			switchs: map[string]int{"sw1": 1, "sw2": 2, "sw3": 3},
			binding: "links sw1→sw2, sw2→sw3 and sw3→sw2 (1 channel each)",
			rate:    30,
		},
		{
			name:    "a forwards to b on its own switch",
			parent:  []int{-1, 0, 1, 0},
			streams: map[string]int{"sw1→sw2": 2, "sw2→sw3": 1},
			switchs: map[string]int{"sw1": 2, "sw2": 2, "sw3": 2},
			binding: "link sw1→sw2 shared by 2 channels",
			rate:    15,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			net := threeSwitches(30 * MB)
			for i := range net.Switches {
				net.Switches[i].Backplane = 1e12
			}
			tree, err := Explicit(tt.parent)
			if err != nil {
				t.Fatal(err)
			}
			r := mustEvaluate(t, net, tree, Compression{})
			for _, dir := range []string{"sw1→sw2", "sw2→sw1", "sw2→sw3", "sw3→sw2"} {
				want := tt.streams[dir]
				if want == 0 {
					if has(r, LinkLimit, dir) {
						t.Errorf("%s carries channels, want none", dir)
					}
					continue
				}
				if c := find(t, r, LinkLimit, dir); c.Streams != want || c.Coef != float64(want) {
					t.Errorf("%s: %d channels (coef %v), want %d", dir, c.Streams, c.Coef, want)
				}
			}
			for sw, want := range tt.switchs {
				if c := find(t, r, BackplaneLimit, sw); c.Streams != want {
					t.Errorf("switch %s: %d streams, want %d", sw, c.Streams, want)
				}
			}
			if !near(r.Rate, tt.rate*MB) || !strings.HasPrefix(r.Bottleneck, tt.binding) {
				t.Errorf("%.2f MB/s by %q, want %v MB/s by %q", r.Rate/MB, r.Bottleneck, tt.rate, tt.binding)
			}
		})
	}
}

func TestShortestPathInARing(t *testing.T) {
	// sw1 – sw2 – sw3 – sw4 – sw1: sw1 reaches sw4 directly, sw3 in two hops.
	res := Resources{Model: ModelBasic}
	net := Network{
		Switches: []Switch{{Name: "sw1"}, {Name: "sw2"}, {Name: "sw3"}, {Name: "sw4"}},
		Links: []SwitchLink{
			{A: "sw1", B: "sw2", Capacity: gbe},
			{A: "sw2", B: "sw3", Capacity: gbe},
			{A: "sw3", B: "sw4", Capacity: gbe},
			{A: "sw4", B: "sw1", Capacity: gbe},
		},
		Hosts: []Host{
			{Name: "src", Switch: "sw1", Link: gbe, Role: RoleSource, Resources: res},
			{Name: "d", Switch: "sw4", Link: gbe, Resources: res},
			{Name: "c", Switch: "sw3", Link: gbe, Resources: res},
		},
	}
	r := mustEvaluate(t, net, Star(2), Compression{})
	if c := find(t, r, LinkLimit, "sw1→sw4"); c.Streams != 1 {
		t.Errorf("sw1→sw4 carries %d channels, want 1 (src→d)", c.Streams)
	}
	hops := 0
	for _, c := range r.Constraints {
		if c.Kind == LinkLimit && strings.HasPrefix(c.Subject, "sw") && !strings.Contains(c.Subject, "→c") && !strings.Contains(c.Subject, "→d") {
			hops += c.Streams
		}
	}
	// src→d: sw1→sw4; src→c: two hops, either way round.
	if hops != 3 {
		t.Errorf("%d inter-switch hops, want 3 (shortest paths): %v", hops, r.Constraints)
	}
}

func TestNetworkErrors(t *testing.T) {
	base := func() Network { return threeSwitches(gbe) }
	tests := []struct {
		name   string
		change func(*Network)
		want   string
	}{
		{"unknown switch", func(n *Network) { n.Hosts[1].Switch = "sw9" }, `unknown switch "sw9"`},
		{"duplicate host", func(n *Network) { n.Hosts[2].Name = "a" }, `host "a" is listed twice`},
		{"negative link", func(n *Network) { n.Hosts[1].Link = -1 }, "negative link capacity"},
		{"bad model", func(n *Network) { n.Hosts[1].Resources.Model = "fast" }, `unknown node model "fast"`},
		{"no model", func(n *Network) { n.Hosts[1].Resources = Resources{} }, "no node model"},
		{"bad role", func(n *Network) { n.Hosts[1].Role = "client" }, `unknown role "client"`},
		{"link to itself", func(n *Network) { n.Links[0].B = "sw1" }, "two different known switches"},
		{"no path", func(n *Network) { n.Links = n.Links[:1] }, "no path from switch sw1 to switch sw3"},
		{"host twice in plan", nil, `appears twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			net := base()
			hosts := hostNames(net)
			if tt.change != nil {
				tt.change(&net)
			} else {
				hosts[2] = "a"
			}
			_, err := Evaluate(net, Plan{Tree: Star(3), Hosts: hosts}, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
