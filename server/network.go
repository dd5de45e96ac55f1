package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
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
	shape := s.cfg.Shape
	if shape == "" && linksUnknown(net, ready) {
		shape = capacity.KindChain
		notes = append(notes, "no link of the lab was measured: -auto keeps to a chain, which loads each link with one stream")
	}
	choose := func(net capacity.Network, compress Compress) (Choice, error) {
		return Choose(net, opt, shape, s.cfg.Fanout, compress, s.img.Encoding)
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
	if r := crowdedEncodeRate(s.profile.EncodeRate, figs.encodeSlowdown); r > 0 && opt.Compression.Enabled() {
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

// network describes the cast's hosts for the model: the topology file's
// network (its hosts that joined, filled in from their probes) or one switch.
func (s *Server) network(ready []*nodeState, figs netFigures) (capacity.Network, []string) {
	var notes []string
	// The busy shares the model takes, of the machines the links did not
	// hold.
	figs.busyShares = s.sharesTaken(figs, ready)
	src := sourceProbe(s.probe)
	sourceUnknown := false
	if len(ready) > 0 {
		// On loopback the source has no link: its sends cost CPU, which
		// the model counts.
		if ip := ready[0].conn.LocalAddr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			if _, speed, err := probe.NICSpeed(ip); err == nil {
				src.NICBytesPerSec = speed
			} else if figs.sourceLink() <= 0 {
				sourceUnknown = true
				s.log.Info("the source's link speed is unknown", "err", err)
			}
			withMeasuredLink(&src, figs.sourceLink())
		}
	}
	probes := []capacity.Probe{src}
	machines := map[string]int{}
	var unprobed, noLink, noDisk []string
	if sourceUnknown {
		noLink = append(noLink, SourceName)
	}
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
		// (see diskCrowd), where that was timed and is dearer than one
		// writer alone, or far cheaper (see diskCrowd.counted).
		if c := figs.disks[n.machine]; c.counted(p.DiskWriteCPUBytesPerSec) {
			p.DiskWriteCPUBytesPerSec = 1 / c.cpu
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
	for _, key := range slices.Sorted(maps.Keys(figs.busyShares)) {
		notes = append(notes, busyShareNote(machines[key], figs.busyShares[key]))
	}
	if t := s.cfg.Topology; t != nil {
		correctDisturbed(probes, machineOf, figs.crowds)
		crowdDecoders(probes, machineOf, figs.decoders)
		net, err := fromTopology(t, probes)
		if err == nil {
			// The file tells the lab's shape; what its machines' hosts
			// cost each other was measured all the same.
			hostMachines := topologyMachines(net, ready, machineOf[0])
			markCrowds(&net, hostMachines, figs.crowds)
			markBusyShares(&net, hostMachines, figs.busyShares)
			return net, append(notes, assumeLinks(&net, noLink)...)
		}
		notes = append(notes, fmt.Sprintf("topology %s not used: %v", t.Name, err))
	}
	mergeMachineProbes(probes, machineOf)
	correctDisturbed(probes, machineOf, figs.crowds)
	crowdDecoders(probes, machineOf, figs.decoders)
	net := capacity.SingleSwitch(probes[0], probes[1:])
	net.LinkEfficiency = capacity.TCPEthernetEfficiency
	shareMachines(net.Hosts, machineOf)
	shareFileDisks(&net, ready)
	markCrowds(&net, machineOf, figs.crowds)
	markBusyShares(&net, machineOf, figs.busyShares)
	markDiskCrowds(&net, machineOf, figs.disks)
	return net, append(notes, assumeLinks(&net, noLink)...)
}

// assumeLinks gives each host of unknown whose link nobody measured (no
// NIC speed, no bandwidth probe, no topology file's figure) the slowest
// link measured in the lab: a link nobody measured is no free link, and
// no plan may win on it. Where no link at all was measured, it leaves
// them unknown (see linksUnknown). SourceName in unknown stands for the
// source, whatever a topology file names it. It returns the note that
// says so.
func assumeLinks(net *capacity.Network, unknown []string) []string {
	named := func(h capacity.Host) bool {
		return slices.Contains(unknown, h.Name) || h.Role == capacity.RoleSource && slices.Contains(unknown, SourceName)
	}
	var slowest float64
	var left []string
	for _, h := range net.Hosts {
		switch {
		case h.Link <= 0 && named(h):
			left = append(left, h.Name)
		case h.Link > 0 && (slowest == 0 || h.Link < slowest):
			slowest = h.Link
		}
	}
	if len(left) == 0 {
		return nil
	}
	if slowest == 0 {
		return []string{fmt.Sprintf("link speed unknown for %s (no NIC speed, no bandwidth probe), and no link measured: the predictions count the machines alone", listNames(left))}
	}
	for i := range net.Hosts {
		if h := &net.Hosts[i]; h.Link <= 0 && named(*h) {
			h.Link = slowest
		}
	}
	return []string{fmt.Sprintf("link speed unknown for %s (no NIC speed, no bandwidth probe): counted as the slowest measured, %s MB/s", listNames(left), mbps(slowest))}
}

// linksUnknown says whether no link of net is known though some of ready
// are reached over a network, not loopback: then no plan may win on its
// links, and -auto keeps to a chain, which loads each link with one
// stream.
func linksUnknown(net capacity.Network, ready []*nodeState) bool {
	for _, h := range net.Hosts {
		if h.Link > 0 {
			return false
		}
	}
	return slices.ContainsFunc(ready, func(n *nodeState) bool { return !n.loopback() })
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
