package server

import (
	"maps"
	"net"
	"path/filepath"
	"strings"
	"time"

	"dolly/capacity"
	"dolly/dolly/probe"
)

// topologyMachines returns the machine each host of net, a topology
// file's, runs on as the nodes told it (their own machine's key), by
// name; the source's is source.
func topologyMachines(net capacity.Network, ready []*nodeState, source string) []string {
	of := map[string]string{}
	for _, n := range ready {
		of[n.name] = n.machine
	}
	machineOf := make([]string, len(net.Hosts))
	for i, h := range net.Hosts {
		machineOf[i] = of[h.Name]
		if h.Role == capacity.RoleSource {
			machineOf[i] = source
		}
	}
	return machineOf
}

// markCrowds gives the machines whose nodes measured their data path all at
// once (hosts[i] runs on machineOf[i]) the contention they found. A
// machine a topology file gives a contention above 0 keeps it: the
// admin's word.
func markCrowds(net *capacity.Network, machineOf []string, crowds map[string]crowd) {
	net.Machines = maps.Clone(net.Machines) // a topology file's is the server's to keep
	hosts := map[string]int{}
	for _, h := range net.Hosts {
		if h.Machine != "" {
			hosts[h.Machine]++
		}
	}
	for i, h := range net.Hosts {
		c, ok := crowds[machineOf[i]]
		if !ok || h.Machine == "" {
			continue
		}
		if mc := net.Machines[h.Machine]; mc.Contention > 0 && !mc.Crowded {
			continue
		}
		setMachine(net, h.Machine, func(mc *capacity.Machine) {
			mc.Contention = c.contention(hosts[h.Machine])
			mc.Crowded = true
		})
	}
}

// setMachine changes the figures of machine name of net by set.
func setMachine(net *capacity.Network, name string, set func(*capacity.Machine)) {
	if net.Machines == nil {
		net.Machines = map[string]capacity.Machine{}
	}
	mc := net.Machines[name]
	set(&mc)
	net.Machines[name] = mc
}

// markDiskCrowds gives the machines whose nodes wrote their shared disk
// all at once (hosts[i] runs on machineOf[i]) the rate it took.
func markDiskCrowds(net *capacity.Network, machineOf []string, disks map[string]diskCrowd) {
	for i, h := range net.Hosts {
		d, ok := disks[machineOf[i]]
		if !ok || h.Machine == "" || !net.Machines[h.Machine].SharedDisk {
			continue
		}
		mc := net.Machines[h.Machine]
		mc.DiskBytesPerSec = d.rate
		net.Machines[h.Machine] = mc
	}
}

// shareFileDisks marks the machines whose nodes all write files or loop
// devices: those land on one file system, whose disk their writes share.
func shareFileDisks(net *capacity.Network, ready []*nodeState) {
	files := map[string]bool{}
	for i, n := range ready {
		m := net.Hosts[i+1].Machine
		if m == "" {
			continue
		}
		if _, seen := files[m]; !seen {
			files[m] = true
		}
		files[m] = files[m] && n.writesFile()
	}
	for m, shared := range files {
		if !shared {
			continue
		}
		if net.Machines == nil {
			net.Machines = map[string]capacity.Machine{}
		}
		mc := net.Machines[m]
		mc.SharedDisk = true
		net.Machines[m] = mc
	}
}

// writesFile says whether the node's target is a file, or a loop device
// over one: a file system's, whose disk other nodes' files may share.
func (n *nodeState) writesFile() bool {
	return !n.block || strings.HasPrefix(filepath.Base(n.target), "loop")
}

// mergeMachineProbes gives every probe of one machine the best CPU and
// memory figures any of them measured: the source's probe and a node's on
// one machine may run at the same time and slow each other down, but the
// hardware is the same. probes[0] is the source's. The decoders' figures
// are the nodes' own: the source's program decodes at speeds of its own
// (see ImageDecode), and decodes only what it converts. Of those, the
// nodes' median counts, not their best: each is timed on its thread's own
// clock, which other programs do not slow, but a machine's speed varies
// from moment to moment (a virtual machine's most), and a cast that
// decodes for seconds runs at its usual speed, not at the best moment's.
func mergeMachineProbes(probes []capacity.Probe, machineOf []string) {
	type decoders struct {
		codecs map[string][]float64
		rle    []float64
	}
	best := map[string]capacity.Probe{}
	dec := map[string]*decoders{}
	for i, p := range probes {
		m := machineOf[i]
		if m == "" {
			continue
		}
		b := best[m]
		b.MemcpyBytesPerSec = max(b.MemcpyBytesPerSec, p.MemcpyBytesPerSec)
		b.DigestBytesPerSec = max(b.DigestBytesPerSec, p.DigestBytesPerSec)
		b.NetStreamBytesPerSec = max(b.NetStreamBytesPerSec, p.NetStreamBytesPerSec)
		b.CompressBytesPerSec = maxRates(b.CompressBytesPerSec, p.CompressBytesPerSec)
		best[m] = b
		if i == 0 {
			continue
		}
		d := dec[m]
		if d == nil {
			d = &decoders{codecs: map[string][]float64{}}
			dec[m] = d
		}
		for codec, r := range p.DecompressBytesPerSec {
			if r > 0 {
				d.codecs[codec] = append(d.codecs[codec], r)
			}
		}
		if p.RLEDecodeBytesPerSec > 0 {
			d.rle = append(d.rle, p.RLEDecodeBytesPerSec)
		}
	}
	for i := range probes {
		b, ok := best[machineOf[i]]
		if !ok {
			continue
		}
		p := &probes[i]
		if p.MemcpyBytesPerSec > 0 {
			p.MemcpyBytesPerSec = b.MemcpyBytesPerSec
		}
		if p.DigestBytesPerSec > 0 {
			p.DigestBytesPerSec = b.DigestBytesPerSec
		}
		if p.NetStreamBytesPerSec > 0 {
			p.NetStreamBytesPerSec = b.NetStreamBytesPerSec
		}
		if p.CompressBytesPerSec != nil {
			p.CompressBytesPerSec = b.CompressBytesPerSec
		}
		if i == 0 {
			continue
		}
		d := dec[machineOf[i]]
		if p.DecompressBytesPerSec != nil {
			merged := map[string]float64{}
			for codec, rates := range d.codecs {
				merged[codec] = median(rates)
			}
			p.DecompressBytesPerSec = merged
		}
		if p.RLEDecodeBytesPerSec > 0 {
			p.RLEDecodeBytesPerSec = median(d.rle)
		}
	}
}

func maxRates(a, b map[string]float64) map[string]float64 {
	if a == nil && b == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = max(out[k], v)
	}
	return out
}

// machineKey tells machines apart: the same interfaces seen at the same
// address are one machine, however many nodes run on it.
func machineKey(id string, macs []string, ip string) string {
	if id != "" {
		return id // one kernel: one machine, whatever its namespaces
	}
	return strings.Join(macs, ",") + "@" + ip
}

// shareMachines marks hosts that run on one machine, so the model adds up
// their demands on its CPU and memory.
func shareMachines(hosts []capacity.Host, machineOf []string) {
	count := map[string]int{}
	for _, m := range machineOf {
		count[m]++
	}
	names := map[string]string{}
	for i, m := range machineOf {
		if m == "" || count[m] < 2 {
			continue
		}
		if names[m] == "" {
			names[m] = hosts[i].Name
		}
		hosts[i].Machine = names[m]
	}
}

// sourceMachine is the machine key of the source, as the nodes' are made.
func (s *Server) sourceMachine(ready []*nodeState) string {
	if len(ready) == 0 {
		return ""
	}
	ip := ready[0].conn.LocalAddr().(*net.TCPAddr).IP
	return machineKey(probe.MachineID(), probe.MACs(), ip.String())
}

// nodesHere counts the nodes running on dolly-server's own machine, and
// sums the CPU time their part of the cast cost them; reported says
// whether every one of them reported it.
func (s *Server) nodesHere(ready []*nodeState) (n int, cpu time.Duration, reported bool) {
	here := s.sourceMachine(ready)
	if here == "" {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	reported = true
	for _, node := range ready {
		if node.machine == here {
			n++
			cpu += node.castCPU
			reported = reported && node.castCPU > 0
		}
	}
	return n, cpu, reported
}
