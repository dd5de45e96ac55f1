package server

import (
	"fmt"
	"maps"
	"slices"

	"dolly/capacity"
	"dolly/dolly/control"
)

// A machine that runs several nodes (the demo, an emulated lab, VMs on one
// host) spends part of its cores on work no node's process does: the
// kernel's threads carry its virtual or shaped links' deferred receives and
// queue timers, and cores wait idle while each node waits for the one
// before it. When the ring of bandwidth probes (every node streaming to
// the next at once) keeps such a machine's CPUs busy, it runs the way a
// cast bound by those CPUs does, and what its nodes' processes got of the
// machine's time is what a cast's get: in the emulated lab (4 nodes on
// unshaped veths, 2 cores) the ring gave them 77-89% and the casts that
// followed 79-90%, where the model had counted all of it.

// minProcessShare is the least process share the model takes: below it
// something else ran on the machine during the ring (another program, a
// VM's host), and a cast will not find it so.
const minProcessShare = 0.5

// processShares is, by machine key, the part of the CPU time of each
// machine that runs two or more nodes which their processes got in the
// ring, where the ring kept its CPUs busy (busyShare or more of the time):
// the processes' time, summed over its nodes, over all its cores' time
// (the median its nodes saw over their probes, which ran at once).
// results[i] is what ready[i] reported. A machine is left out unless every
// node of it reported its process's time and the machine's.
func processShares(ready []*nodeState, results []control.NetResult) map[string]float64 {
	type machine struct {
		nodes      int
		own        float64
		total, use []float64
		ok         bool
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
		if r.Error != "" || r.CPU <= 0 || total <= 0 {
			m.ok = false
			continue
		}
		m.own += r.CPU
		m.total = append(m.total, total)
		m.use = append(m.use, r.MachineCPU/total)
	}
	shares := map[string]float64{}
	for key, m := range by {
		if m.nodes < 2 || !m.ok || median(m.use) < busyShare {
			continue
		}
		// The clock's grain and the probes' spans, a little apart, may
		// put the sum a little past the machine's time. A machine whose
		// programs took most of it is not one a cast is measured on.
		if share := min(1, m.own/median(m.total)); share >= minProcessShare {
			shares[key] = share
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

// sharesTaken is the process shares the model takes for the cast's
// machines: those the links did not hold (heldByCPU), of machines whose
// hosts the model sees as one machine (a topology file that names no
// machine for a node's host leaves its machine out).
func (s *Server) sharesTaken(figs netFigures, ready []*nodeState) map[string]float64 {
	shares := heldByCPU(figs.processShare, ready, func(n *nodeState) float64 { return figs.link(n.name) }, s.fileLink)
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

// markProcessShares gives the machines whose ring measured it (hosts[i]
// runs on machineOf[i]) the share of their cores their hosts' processes
// get.
func markProcessShares(net *capacity.Network, machineOf []string, shares map[string]float64) {
	net.Machines = maps.Clone(net.Machines) // a topology file's is the server's to keep
	for i, h := range net.Hosts {
		if share, ok := shares[machineOf[i]]; ok && h.Machine != "" {
			setMachine(net, h.Machine, func(mc *capacity.Machine) { mc.ProcessShare = share })
		}
	}
}

// processShareNote says what the model takes from the ring's share of a
// machine of nodes nodes, for the preview.
func processShareNote(nodes int, share float64) string {
	return fmt.Sprintf("the ring kept the CPUs of the machine of %s busy, and their processes got %.0f%% of its cores' time (the rest went to the kernel's threads and to cores idle while each node waited for the one before): the model counts that share of the cores as the cast's",
		plural(nodes, "node"), 100*share)
}
