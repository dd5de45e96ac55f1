package lab

import (
	"encoding/json"
	"strconv"
)

// Topology describes the lab's shape for dolly's capacity model, as an
// admin would of a real lab: switches, trunks, every host with its link
// speed, all on one machine. It carries no measured figure: a cast fills
// the hosts in from the nodes' own probes.
func (l *Lab) Topology(spec Spec) ([]byte, error) {
	type host struct {
		Name    string `json:"name"`
		Switch  string `json:"switch"`
		Link    string `json:"link,omitempty"`
		Role    string `json:"role,omitempty"`
		Machine string `json:"machine"`
	}
	type link struct {
		A        string `json:"a"`
		B        string `json:"b"`
		Capacity string `json:"capacity,omitempty"`
	}
	type sw struct {
		Name string `json:"name"`
	}
	file := struct {
		Name           string  `json:"name"`
		Switches       []sw    `json:"switches"`
		Links          []link  `json:"links,omitempty"`
		Hosts          []host  `json:"hosts"`
		LinkEfficiency float64 `json:"link_efficiency"`
	}{Name: "emulated lab", LinkEfficiency: TCPEfficiency}
	switches := spec.Switches
	if len(switches) == 0 {
		switches = []string{"sw1"}
	}
	for _, s := range switches {
		file.Switches = append(file.Switches, sw{s})
	}
	for _, t := range spec.Trunks {
		file.Links = append(file.Links, link{A: t.A, B: t.B, Capacity: mbitRate(t.Mbit)})
	}
	for i, h := range append([]*Host{l.Server}, l.Nodes...) {
		hf := host{Name: h.Name, Switch: h.Switch, Link: mbitRate(h.Mbit), Machine: Machine}
		if i == 0 {
			hf.Name, hf.Role = "dolly-server", "source"
		}
		file.Hosts = append(file.Hosts, hf)
	}
	return json.MarshalIndent(file, "", "  ")
}

func mbitRate(mbit float64) string {
	if mbit <= 0 {
		return ""
	}
	return strconv.FormatFloat(mbit, 'f', -1, 64) + "Mbit"
}
