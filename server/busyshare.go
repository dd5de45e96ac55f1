package server

import (
	"fmt"
	"maps"
	"slices"

	"dolly/capacity"
	"dolly/dolly/control"
)

// A machine that runs several nodes (the demo, an emulated lab, VMs on one
// host) spends part of its cores on work no node's process does, and
// leaves part idle. The kernel's threads carry its virtual or shaped
// links' deferred receives and queue timers: that work comes with every
// byte a node streams in and out, and its link figure (linkCPU, the
// machine's busy time over the ring's bytes) counts it by the byte. And
// cores wait idle while each node waits for the one before it: when the
// ring of bandwidth probes (every node streaming to the next at once)
// keeps such a machine's CPUs busy, it runs the way a cast bound by those
// CPUs does, and the part of the time its CPUs were busy is a cast's too
// (capacity.Machine.BusyShare).
//
// The ring's processes' share of the cores stood for both once, but the
// kernel's part follows the bytes on the links, not the cast's work: on
// tbf-shaped veths of 10 Gbit/s the ring gave 4 nodes' processes 60% of
// the cores, and a zstd chain of 4, which streams a tenth of the bytes,
// gave them 89% and ran at 1.53 times the rate that share predicted
// (the preview 7% over it with the kernel's part by the byte). On unshaped veths the raw
// and zstd chains of 4 came within 5%.

// busyShares is, by machine key, the part of the time the CPUs of each
// machine that runs two or more nodes were busy in the ring, where the
// ring kept them busy (busyShare or more of the time): the median its
// nodes saw over their probes, which ran at once. results[i] is what
// ready[i] reported. A machine is left out unless every node of it
// reported the machine's time.
func busyShares(ready []*nodeState, results []control.NetResult) map[string]float64 {
	type machine struct {
		nodes int
		use   []float64
		ok    bool
	}
	by := map[string]*machine{}
	for i, n := range ready {
		if n.machine == "" {
			continue
		}
		m := by[n.machine]
		if m == nil {
			m = &machine{ok: true}
			by[n.machine] = m
		}
		m.nodes++
		r := results[i]
		total := r.MachineCPU + r.MachineIdle
		if r.Error != "" || total <= 0 {
			m.ok = false
			continue
		}
		m.use = append(m.use, r.MachineCPU/total)
	}
	shares := map[string]float64{}
	for key, m := range by {
		if m.nodes < 2 || !m.ok {
			continue
		}
		if use := median(m.use); use >= busyShare {
			shares[key] = min(1, use)
		}
	}
	return shares
}

// linkHeld is how close to a link's known speed the ring's rate on it
// may come before the ring counts as held back by its links, not the CPU:
// TCP over Ethernet carries about 94% of the line rate.
const linkHeld = 0.8

// heldByCPU returns the shares of the machines whose ring the CPU held
// back: on a machine where some node's ring carried nearly what a
// topology file says its link takes, the links kept the CPUs busy as much
// as the nodes' work did, and a cast there runs as its links let it, not
// as the ring did. In the lab of two switches (16 nodes on 1 Gbit/s links,
// 2 cores) the ring kept the CPUs busy and gave the processes 87-94% of
// them, but the links held the raw chain of 8, whose preview fell 12-16%
// below it with that share counted. Only the file's speeds count: the
// nodes sharing a machine have virtual NICs, whose speed (10 Gbit/s for a
// veth) is a name, not a limit; in the lab's unshaped chain of 4 the ring,
// held back by the CPU, carried 0.7-1.26 GB/s on such links. known(n) is
// n's link speed, 0 if unknown.
func heldByCPU(shares map[string]float64, ready []*nodeState, ring func(n *nodeState) float64, known func(n *nodeState) float64) map[string]float64 {
	if len(shares) == 0 {
		return shares
	}
	held := maps.Clone(shares)
	for _, n := range ready {
		if speed := known(n); speed > 0 && ring(n) >= linkHeld*speed {
			delete(held, n.machine)
		}
	}
	return held
}

// sharesTaken is the busy shares the model takes for the cast's
// machines: those the links did not hold (heldByCPU), of machines whose
// hosts the model sees as one machine (a topology file that names no
// machine for a node's host leaves its machine out).
func (s *Server) sharesTaken(figs netFigures, ready []*nodeState) map[string]float64 {
	shares := heldByCPU(figs.busyShares, ready, func(n *nodeState) float64 { return figs.link(n.name) }, s.fileLink)
	t := s.cfg.Topology
	if t == nil {
		return shares
	}
	for _, n := range ready {
		if _, ok := shares[n.machine]; !ok {
			continue
		}
		i := slices.IndexFunc(t.Network.Hosts, func(h capacity.Host) bool { return h.Name == n.name })
		if i < 0 || t.Network.Hosts[i].Machine == "" {
			delete(shares, n.machine)
		}
	}
	return shares
}

// fileLink is n's link speed as the topology file gives it; 0 where it
// does not.
func (s *Server) fileLink(n *nodeState) float64 {
	if t := s.cfg.Topology; t != nil {
		for _, h := range t.Network.Hosts {
			if h.Name == n.name {
				return h.Link
			}
		}
	}
	return 0
}

// markBusyShares gives the machines whose ring measured it (hosts[i]
// runs on machineOf[i]) the part of the time their cores are busy.
func markBusyShares(net *capacity.Network, machineOf []string, shares map[string]float64) {
	net.Machines = maps.Clone(net.Machines) // a topology file's is the server's to keep
	for i, h := range net.Hosts {
		if share, ok := shares[machineOf[i]]; ok && h.Machine != "" {
			setMachine(net, h.Machine, func(mc *capacity.Machine) { mc.BusyShare = share })
		}
	}
}

// busyShareNote says what the model takes from the ring's busy share of a
// machine of nodes nodes, for the preview.
func busyShareNote(nodes int, share float64) string {
	return fmt.Sprintf("the ring kept the CPUs of the machine of %s busy %.0f%% of the time (the rest, cores idle while each node waited for the one before): the model counts that share of the cores as the cast's, and the kernel's threads' work for each node's stream by the byte",
		plural(nodes, "node"), 100*share)
}
