package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"dolly/capacity"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
)

// choose asks the capacity model for the plan, from the nodes' probes and
// the source's (and the topology file, if any). When the model cannot judge,
// the operator's shape (or a chain) runs with the image as stored.
func (s *Server) choose(ctx context.Context, ready []*nodeState, figs netFigures) Choice {
	select {
	case <-s.probed:
	case <-ctx.Done():
	}

	names := []string{SourceName}
	for _, n := range ready {
		names = append(names, n.name)
	}
	net, opt, notes := s.model(ready, figs)
	choose := func(net capacity.Network, compress Compress) (Choice, error) {
		return Choose(net, opt, s.cfg.Shape, s.cfg.Fanout, compress, s.img.Encoding)
	}
	ch, err := choose(net, s.cfg.Compress)
	if err == nil {
		ch = serveApart(net, opt, ch, choose)
	}
	if err == nil && !ch.Modeled {
		err = errors.New("nothing limits any plan in the model: no probes, and no topology file")
	}
	if err != nil {
		ch = fallbackChoice(names, s.cfg.Shape, s.cfg.Fanout, s.cfg.Compress, s.img.Encoding, err)
	}
	ch.Notes = append(notes, ch.Notes...)
	s.logTightest(ctx, ch.Result)
	return ch
}

// logTightest logs, for -v, the constraints of the chosen plan that allow
// the least rate, tightest first: what the plan is one step from being
// bound by, when its prediction and the cast disagree.
func (s *Server) logTightest(ctx context.Context, r capacity.Result) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	cs := slices.Clone(r.Constraints)
	slices.SortFunc(cs, func(a, b capacity.Constraint) int { return cmp.Compare(a.Bound(), b.Bound()) })
	for _, c := range cs[:min(len(cs), 6)] {
		s.log.Debug("model constraint", "plan", planName(r), "constraint", c.String())
	}
	// Each host's CPU per byte of image, which a shared machine sums:
	// the figure to look at when a crowded machine's prediction swings.
	cpu := map[string]string{}
	for _, c := range r.Constraints {
		if c.Kind == capacity.CPULimit {
			cpu[c.Subject] = fmt.Sprintf("%.3f ns", c.Coef*1e9)
		}
	}
	s.log.Debug("model CPU per byte", "plan", planName(r), "hosts", cpu)
}

// zeroedRuns is the share of the image in zero runs that the nodes zero:
// all but those in free blocks (freeShare of the image, which they leave
// or discard). On the disks of the writing nodes that zero by writing
// zeros it costs a write, and the note says so.
func zeroedRuns(zeroFraction, freeShare float64, writing, nodes int) (float64, string) {
	zeroed := max(0, zeroFraction-freeShare)
	if writing == 0 || zeroed < 0.01 {
		return zeroed, ""
	}
	return zeroed, fmt.Sprintf("%d of %d nodes zero by writing zeros (their disks take no write-zeroes command): the %.0f%% of the image in zero runs outside free blocks costs their disks a write",
		writing, nodes, 100*zeroed)
}

// model is what the capacity model plans from: the network of the source
// and ready, and the image's options.
func (s *Server) model(ready []*nodeState, figs netFigures) (capacity.Network, capacity.Options, []string) {
	net, notes := s.network(ready, figs)
	opt := Options(s.profile, s.cfg.FrameSize)
	opt.MaxStreamRate = s.cfg.MaxRate
	writing := 0
	for _, n := range ready {
		if n.probe != nil && n.probe.ZeroesByWriting {
			writing++
		}
	}
	var note string
	opt.ZeroedFraction, note = zeroedRuns(opt.ZeroFraction, s.freeShare, writing, len(ready))
	if note != "" {
		notes = append(notes, note)
	}
	if f := DecodeFactor(s.profile); f != 1 {
		ImageDecode(&net, opt.Compression.Codec, s.profile)
		note := fmt.Sprintf("this image decodes at %.2f× the speed of the standard sample (%s MB/s per core here)", f, mbps(s.profile.DecodeRate))
		if q := s.profile.RLEFraction; q > 0 {
			note += fmt.Sprintf("; %.0f%% of it from RLE blocks (%.2f× the sample's speed here), which each node decodes at the speed it measured for them", 100*q, s.profile.RLEFactor)
			if k := s.profile.RLESkipped; k > 0 {
				note += fmt.Sprintf(", but for the %.0f%% of the image deep in runs of zeros, which no node decodes", 100*k)
			}
		}
		notes = append(notes, note)
	}
	if t := s.cfg.Topology; t != nil && t.Options.Startup > 0 {
		opt.Startup = t.Options.Startup // the admin's word
	} else if d, note := startup(ready, figs); d > 0 {
		opt.Startup = d
		notes = append(notes, note)
	}
	if s.cfg.Compress == CompressNo {
		// No plan compresses, and the nodes timed no decoder for one
		// (see unusedDecoders).
		opt.Compression = capacity.Compression{}
	}
	if r := s.profile.EncodeRate; r > 0 && opt.Compression.Enabled() {
		SetSourceEncode(&net, opt.Compression.Codec, r)
		notes = append(notes, fmt.Sprintf("this image compresses at %s MB/s per core here, on %s, should the source compress it",
			mbps(r), plural(stream.CompressWorkers(), "thread")))
	}
	for i := range net.Hosts {
		if h := &net.Hosts[i]; h.Role == capacity.RoleSource {
			h.Resources.CompressThreads = stream.CompressWorkers()
		}
	}
	if opt.HoleFraction > 0 {
		notes = append(notes, fmt.Sprintf("the image file keeps %.0f%% of the image as holes (a sparse file): sent as zero runs without being read", 100*opt.HoleFraction))
	}
	return net, opt, notes
}

// SetSourceEncode sets the rate at which the source compresses this image
// per core: timed on the image itself, it stands for the probe's figure on
// the standard sample, which may compress far faster or slower.
func SetSourceEncode(net *capacity.Network, codec string, rate float64) {
	for i := range net.Hosts {
		h := &net.Hosts[i]
		if h.Role != capacity.RoleSource {
			continue
		}
		rates := maps.Clone(h.Resources.CPU.Compress)
		if rates == nil {
			rates = map[string]float64{}
		}
		rates[codec] = rate
		h.Resources.CPU.Compress = rates
	}
}

// network describes the cast's hosts for the model: the topology file's
// network (its hosts that joined, filled in from their probes) or one switch.
func (s *Server) network(ready []*nodeState, figs netFigures) (capacity.Network, []string) {
	var notes []string
	src := sourceProbe(s.probe)
	if len(ready) > 0 {
		// On loopback the source has no link: its sends cost CPU, which
		// the model counts.
		if ip := ready[0].conn.LocalAddr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			if _, speed, err := probe.NICSpeed(ip); err == nil {
				src.NICBytesPerSec = speed
			} else if figs.sourceLink() <= 0 {
				notes = append(notes, fmt.Sprintf("the source's link speed is unknown: %v", err))
			}
			withMeasuredLink(&src, figs.sourceLink())
		}
	}
	probes := []capacity.Probe{src}
	machines := map[string]int{}
	var unprobed, noLink, noDisk []string
	machineOf := []string{s.sourceMachine(ready)}
	// One node measured each machine (see enroll); the others on it share
	// its figures.
	measured := map[string]*capacity.Probe{}
	for _, n := range ready {
		if n.probe != nil && measured[n.machine] == nil {
			measured[n.machine] = n.probe
		}
	}
	for _, n := range ready {
		machineOf = append(machineOf, n.machine)
		own := n.probe
		if own == nil {
			own = measured[n.machine]
		}
		p := probeFor(n.name, own)
		// What a byte written cost the machine with all its nodes writing
		// (see measureDiskCrowds), where that is more than one writer's.
		if c := figs.disks[n.machine].cpu; c > 0 && p.DiskWriteCPUBytesPerSec > 1/c {
			p.DiskWriteCPUBytesPerSec = 1 / c
		}
		if !n.loopback() {
			withMeasuredLink(&p, figs.link(n.name))
			if c := figs.linkCPU(n); c > 0 {
				p.LinkStreamBytesPerSec = 1 / c
			}
		}
		probes = append(probes, p)
		switch {
		case own == nil:
			unprobed = append(unprobed, n.name)
		case p.NICBytesPerSec <= 0 && !n.loopback():
			noLink = append(noLink, n.name)
		}
		if own != nil && p.DiskWriteBytesPerSec <= 0 {
			noDisk = append(noDisk, n.name)
		}
		machines[n.machine]++
	}
	if figs.took > 0 {
		notes = append(notes, figs.describe(ready))
	}
	if len(unprobed) > 0 {
		notes = append(notes, fmt.Sprintf("no probe from %s: their figures are not modelled", listNames(unprobed)))
	}
	if len(noLink) > 0 {
		notes = append(notes, fmt.Sprintf("link speed unknown for %s (no NIC speed, no bandwidth probe): not modelled", listNames(noLink)))
	}
	if len(noDisk) > 0 {
		why := "their probes could not measure it"
		if !s.confirmed() {
			why = "nothing is written to a target before you confirm"
		}
		notes = append(notes, fmt.Sprintf("disk write rate not measured on %s (%s): assumed to keep up", listNames(noDisk), why))
	}
	var cached []string
	for _, n := range ready {
		if n.cachedBy != "" {
			cached = append(cached, n.name)
		}
	}
	if len(cached) > 0 {
		notes = append(notes, fmt.Sprintf("%s write loop devices without direct I/O: their writes fill the page cache of the files behind them first, which the probes do not see and the model does not count (where fresh memory costs, as in a VM, such a cast runs slower than predicted); losetup --direct-io=on writes them as a disk would take them",
			listNames(cached)))
	}
	if len(machines) < len(ready) {
		notes = append(notes, fmt.Sprintf("%d nodes run on %s: the model shares out its CPU and memory, and the disk of one whose targets are files", len(ready), plural(len(machines), "machine")))
	}
	if t := s.cfg.Topology; t != nil {
		correctDisturbed(probes, machineOf, figs.crowds)
		net, err := fromTopology(t, probes)
		if err == nil {
			// The file tells the lab's shape; what its machines' hosts
			// cost each other was measured all the same.
			markCrowds(&net, topologyMachines(net, ready, machineOf[0]), figs.crowds)
			return net, notes
		}
		notes = append(notes, fmt.Sprintf("topology %s not used: %v", t.Name, err))
	}
	mergeMachineProbes(probes, machineOf)
	correctDisturbed(probes, machineOf, figs.crowds)
	net := capacity.SingleSwitch(probes[0], probes[1:])
	net.LinkEfficiency = capacity.TCPEthernetEfficiency
	shareMachines(net.Hosts, machineOf)
	shareFileDisks(&net, ready)
	markCrowds(&net, machineOf, figs.crowds)
	markDiskCrowds(&net, machineOf, figs.disks)
	return net, notes
}

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
		if net.Machines == nil {
			net.Machines = map[string]capacity.Machine{}
		}
		mc := net.Machines[h.Machine]
		if mc.Contention > 0 && !mc.Crowded {
			continue
		}
		mc.Contention = c.contention(hosts[h.Machine])
		mc.Crowded = true
		net.Machines[h.Machine] = mc
	}
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

// startup is the cast's start-up as the probes measured it: the longest
// the source took to connect to a node in the bandwidth probes, all at
// once (a cast's hops connect to their upstreams at once too), and the
// longest final flush of a node's target in its write probe (a cast ends
// with one). 0 when the connections were not measured: the model then
// counts capacity.DefaultStartup. The note says what it holds.
func startup(ready []*nodeState, figs netFigures) (time.Duration, string) {
	if figs.connect <= 0 {
		return 0, ""
	}
	var flush float64
	for _, n := range ready {
		if n.probe != nil {
			flush = max(flush, n.probe.SyncSeconds)
		}
	}
	d := figs.connect + time.Duration(flush*float64(time.Second))
	note := fmt.Sprintf("start-up %s: connecting took %s", formatMillis(d), formatMillis(figs.connect))
	if flush > 0 {
		note += fmt.Sprintf(", a target's final flush %s", formatMillis(time.Duration(flush*float64(time.Second))))
	} else {
		note += " (the targets' final flush not measured)"
	}
	return d, note
}

// formatMillis shows a short time in milliseconds, to a tenth below 10.
func formatMillis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
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

// fromTopology takes the topology file's network down to the hosts of this
// cast and fills in what their probes measured.
func fromTopology(t *capacity.Topology, probes []capacity.Probe) (capacity.Network, error) {
	net := t.Network
	want := map[string]bool{}
	for _, p := range probes[1:] {
		want[p.Hostname] = true
	}
	net.Hosts = nil
	for _, h := range t.Network.Hosts {
		if h.Role == capacity.RoleSource {
			probes[0].Hostname = h.Name
			net.Hosts = append(net.Hosts, h)
			continue
		}
		if want[h.Name] {
			net.Hosts = append(net.Hosts, h)
			delete(want, h.Name)
		}
	}
	if len(want) > 0 {
		var missing []string
		for n := range want {
			missing = append(missing, n)
		}
		slices.Sort(missing)
		return net, fmt.Errorf("nodes %s are not in it", strings.Join(missing, ", "))
	}
	net.ApplyProbes(probes)
	return net, nil
}

// DecodeFactor is how fast the image decodes against the probes' standard
// sample, both timed together on the server; 1 when unknown.
func DecodeFactor(p probe.Profile) float64 {
	if p.DecodeFactor <= 0 {
		return 1
	}
	return p.DecodeFactor
}

// ImageDecode sets every host's decoding rate for codec to the image's:
// its rate on the standard sample times the image's factor (DecodeFactor)
// or, for an image with RLE blocks and a host that timed its own fill of
// them, the image's cost on this machine with its RLE blocks at the host's
// speed in place of this machine's. A byte loop's speed depends on where
// a program's code lies as much as on the machine: the same zstd decoder
// fills RLE blocks about twice as fast, against the standard sample, in
// one of dolly's programs as in another, and in a filesystem's image they
// are often most of it.
func ImageDecode(net *capacity.Network, codec string, p probe.Profile) {
	f := DecodeFactor(p)
	for i := range net.Hosts {
		cpu := net.Hosts[i].Resources.CPU
		v, ok := cpu.Decompress[codec]
		if !ok {
			continue
		}
		scaled := maps.Clone(cpu.Decompress)
		scaled[codec] = decodeRate(v, cpu.DecompressRLE, f, p.RLEFraction, p.RLEFactor, p.RLESkipped)
		net.Hosts[i].Resources.CPU.Decompress = scaled
	}
}

// decodeRate is a host's rate on an image: sample is its rate on the
// standard sample and rle on RLE blocks; the image decodes here at factor
// times the sample's rate, and a share q of it from RLE blocks, which
// decode here at rleFactor times the sample's rate. In units of the
// sample's cost a byte of the image costs 1/factor here: q/rleFactor for
// its RLE blocks, the rest for its data, which costs the host alike. The
// share skipped of the RLE blocks' bytes a node never decodes.
func decodeRate(sample, rle, factor, q, rleFactor, skipped float64) float64 {
	if !(q > 0) || !(rleFactor > 0) || q > 1 {
		return sample * factor
	}
	data := max(0, 1/factor-q/rleFactor)
	filled := max(0, q-max(0, skipped))
	if !(rle > 0) {
		// No figure of the host's own for RLE blocks: this machine's.
		return sample / (data + filled/rleFactor)
	}
	return sample / (data + filled*sample/rle)
}

// withMeasuredLink lowers a probe's link speed to what a bandwidth probe
// measured, when that is less: a NIC's speed is only a ceiling. The
// measured rate is TCP payload; the model takes a link's line rate and its
// payload share of it, so the rate is scaled up by that share.
func withMeasuredLink(p *capacity.Probe, measured float64) {
	if measured <= 0 {
		return
	}
	line := measured / capacity.TCPEthernetEfficiency
	if p.NICBytesPerSec <= 0 || line < p.NICBytesPerSec {
		p.NICBytesPerSec = line
	}
}

// loopback reports whether the node takes its data over the loopback
// interface: what a probe measures there is the CPU of the machine it
// shares with its peers (counted as such), not a link.
func (n *nodeState) loopback() bool {
	host, _, err := net.SplitHostPort(n.dataAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// allLoopback reports whether every node takes its data over loopback:
// there is then no link to measure.
func allLoopback(ready []*nodeState) bool {
	for _, n := range ready {
		if !n.loopback() {
			return false
		}
	}
	return true
}
