package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"dolly/capacity"
	"dolly/dolly"
	"dolly/imaging"
)

// castPlan is a logical topology with its vertices bound to nodes: vertex 0
// is the source, vertex v is nodes[v-1].
type castPlan struct {
	tree  capacity.Tree
	nodes []*nodeState
	send  imaging.Encoding // how the stream travels
}

// choose asks the capacity model for the plan, from the nodes' probes and
// the source's (and the topology file, if any). When the model cannot judge,
// the operator's shape (or a chain) runs with the image as stored.
func (s *Server) choose(ctx context.Context, ready []*nodeState) Choice {
	select {
	case <-s.probed:
	case <-ctx.Done():
	}
	names := []string{SourceName}
	for _, n := range ready {
		names = append(names, n.name)
	}
	net, notes := s.network(ready)
	opt := Options(s.profile, s.cfg.FrameSize)
	if f := decodeFactor(s.profile, s.probe.Probe); f != 1 {
		scaleDecode(&net, opt.Compression.Codec, f)
		notes = append(notes, fmt.Sprintf("this image decodes at %.2f× the speed of the standard sample (%s MB/s per core here)", f, mbps(s.profile.DecodeRate)))
	}
	ch, err := Choose(net, opt, s.cfg.Shape, s.cfg.Fanout, s.cfg.Compress, s.img.Encoding)
	if err == nil && !ch.Modeled {
		err = errors.New("nothing limits any plan in the model: no probes, and no topology file")
	}
	if err != nil {
		ch = fallbackChoice(names, s.cfg.Shape, s.cfg.Fanout, s.cfg.Compress, s.img.Encoding, err)
	}
	ch.Notes = append(notes, ch.Notes...)
	return ch
}

// network describes the cast's hosts for the model: the topology file's
// network (its hosts that joined, filled in from their probes) or one switch.
func (s *Server) network(ready []*nodeState) (capacity.Network, []string) {
	var notes []string
	src := sourceProbe(s.probe)
	if len(ready) > 0 {
		ip := ready[0].conn.LocalAddr().(*net.TCPAddr).IP
		if _, speed, err := dolly.NICSpeed(ip); err == nil {
			src.NICBytesPerSec = speed
		} else {
			notes = append(notes, fmt.Sprintf("the source's link speed is unknown: %v", err))
		}
	}
	probes := []capacity.Probe{src}
	machines := map[string]int{}
	var unprobed, noLink []string
	machineOf := []string{""}
	if len(ready) > 0 {
		ip := ready[0].conn.LocalAddr().(*net.TCPAddr).IP
		machineOf[0] = machineKey(dolly.MACs(), ip.String())
	}
	for _, n := range ready {
		machineOf = append(machineOf, n.machine)
		p := probeFor(n.name, n.probe)
		probes = append(probes, p)
		switch {
		case n.probe == nil:
			unprobed = append(unprobed, n.name)
		case p.NICBytesPerSec <= 0:
			noLink = append(noLink, n.name)
		}
		machines[n.machine]++
	}
	if len(unprobed) > 0 {
		notes = append(notes, fmt.Sprintf("no probe from %s: their figures are not modelled", listNames(unprobed)))
	}
	if len(noLink) > 0 {
		notes = append(notes, fmt.Sprintf("link speed unknown for %s (loopback or a virtual NIC): not modelled", listNames(noLink)))
	}
	if len(machines) < len(ready) {
		notes = append(notes, fmt.Sprintf("%d nodes run on %s: the model shares out their CPU and memory", len(ready), plural(len(machines), "machine")))
	}
	if t := s.cfg.Topology; t != nil {
		net, err := fromTopology(t, probes)
		if err == nil {
			return net, notes
		}
		notes = append(notes, fmt.Sprintf("topology %s not used: %v", t.Name, err))
	}
	mergeMachineProbes(probes, machineOf)
	net := capacity.SingleSwitch(probes[0], probes[1:])
	net.LinkEfficiency = capacity.TCPEthernetEfficiency
	shareMachines(net.Hosts, machineOf)
	return net, notes
}

// mergeMachineProbes gives every probe of one machine the best CPU and
// memory figures any of them measured: nodes on one machine probe at the
// same time and slow each other down, but the hardware is the same.
func mergeMachineProbes(probes []capacity.Probe, machineOf []string) {
	best := map[string]capacity.Probe{}
	for i, p := range probes {
		m := machineOf[i]
		if m == "" {
			continue
		}
		b := best[m]
		b.MemcpyBytesPerSec = max(b.MemcpyBytesPerSec, p.MemcpyBytesPerSec)
		b.DigestBytesPerSec = max(b.DigestBytesPerSec, p.DigestBytesPerSec)
		b.NetStreamBytesPerSec = max(b.NetStreamBytesPerSec, p.NetStreamBytesPerSec)
		b.DecompressBytesPerSec = maxRates(b.DecompressBytesPerSec, p.DecompressBytesPerSec)
		b.CompressBytesPerSec = maxRates(b.CompressBytesPerSec, p.CompressBytesPerSec)
		best[m] = b
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
		if p.DecompressBytesPerSec != nil {
			p.DecompressBytesPerSec = b.DecompressBytesPerSec
		}
		if p.CompressBytesPerSec != nil {
			p.CompressBytesPerSec = b.CompressBytesPerSec
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
func machineKey(macs []string, ip string) string {
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

// bind ties the chosen plan's vertices to the nodes.
func (s *Server) bind(ch Choice, ready []*nodeState) castPlan {
	byName := map[string]*nodeState{}
	for _, n := range ready {
		byName[n.name] = n
	}
	p := castPlan{tree: ch.Result.Plan.Tree, send: ch.Send}
	for _, name := range ch.Result.Plan.Hosts[1:] {
		p.nodes = append(p.nodes, byName[name])
	}
	return p
}

func (p castPlan) name(v int) string {
	if v == 0 {
		return SourceName
	}
	return p.nodes[v-1].name
}

// subtree lists the nodes at and below vertex v.
func (p castPlan) subtree(v int) []*nodeState {
	kids := p.tree.ChildLists()
	var out []*nodeState
	var walk func(int)
	walk = func(v int) {
		if v > 0 {
			out = append(out, p.nodes[v-1])
		}
		for _, w := range kids[v] {
			walk(w)
		}
	}
	walk(v)
	return out
}

// runCast assigns every node its place, streams the image and collects the
// verdicts. It returns the source's digest.
func (s *Server) runCast(ctx context.Context, p castPlan, ready []*nodeState) (imaging.Digest, error) {
	enc, err := dolly.NewEncoder(s.img, s.cast, s.cfg.FrameSize, p.send)
	if err != nil {
		s.abortAll(err.Error())
		return imaging.Digest{}, err
	}
	kids := p.tree.ChildLists()
	now := time.Now()
	s.mu.Lock()
	for _, n := range p.nodes {
		n.status, n.start = stCasting, now
	}
	s.mu.Unlock()
	for v := 1; v < len(kids); v++ {
		a := dolly.Assign{Upstream: p.name(p.tree.Parent[v]), Encoding: p.send.String()}
		for _, w := range kids[v] {
			a.Children = append(a.Children, dolly.Peer{Name: p.name(w), Addr: p.nodes[w-1].dataAddr})
		}
		if err := p.nodes[v-1].conn.Send(dolly.Message{Type: dolly.MsgAssign, Assign: &a}); err != nil {
			s.nodeFailed(p.nodes[v-1], err.Error())
		}
	}

	src := &source{s: s, enc: enc, plan: p, digest: make(chan imaging.Digest, 1)}
	sendErr := make(chan error, 1)
	go func() { sendErr <- src.send(ctx, kids[0]) }()

	view := newProgressView(s.cfg.Out, s.cfg.Interactive, s.cfg.ProgressEvery, s.img.Size)
	tick := time.NewTicker(view.interval())
	defer tick.Stop()
	var digest imaging.Digest
	haveDigest, sent := false, false
	for {
		select {
		case err := <-sendErr:
			sent = true
			sendErr = nil
			if err != nil {
				s.abortAll(err.Error())
				view.finish(s.snapshot(p), src.sent.Load())
				return digest, err
			}
		case digest = <-src.digest:
			haveDigest = true
		case <-s.changed:
		case <-tick.C:
			view.draw(s.snapshot(p), src.sent.Load())
		case <-ctx.Done():
			s.abortAll("dolly-server was interrupted")
			view.finish(s.snapshot(p), src.sent.Load())
			return digest, ctx.Err()
		}
		if haveDigest {
			s.sendVerdicts(p, digest)
		}
		if sent && s.allFinished(p) {
			view.finish(s.snapshot(p), src.sent.Load())
			return digest, nil
		}
	}
}

// sendVerdicts compares each reported digest with the source's and tells
// the node. A node whose target is verified may reboot at once.
func (s *Server) sendVerdicts(p castPlan, digest imaging.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range p.nodes {
		if n.status != stDone || n.verified || n.reason != "" {
			continue
		}
		r := dolly.Result{OK: n.digest == digest.String()}
		if r.OK {
			n.verified = true
			r.Message = "target verified"
		} else {
			n.reason = fmt.Sprintf("digest %.12s differs from the source's %s", n.digest, digest.Short())
			r.Message = n.reason
		}
		if err := n.conn.Send(dolly.Message{Type: dolly.MsgResult, Result: &r}); err != nil {
			s.log.Warn("sending verdict", "node", n.name, "err", err)
		}
	}
}

func (s *Server) allFinished(p castPlan) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range p.nodes {
		if !n.finished() || (n.status == stDone && !n.verified && n.reason == "") {
			return false
		}
	}
	return true
}

// source streams the image to the source's children.
type source struct {
	s      *Server
	enc    *dolly.Encoder
	plan   castPlan
	digest chan imaging.Digest
	sent   atomic.Int64 // stream bytes sent (once, not per child)
}

type sink struct {
	v    int
	node *nodeState
	conn net.Conn
}

func (src *source) send(ctx context.Context, children []int) error {
	s := src.s
	deadline := time.Now().Add(2 * time.Minute)
	var sinks []*sink
	defer func() {
		for _, k := range sinks {
			if k.conn != nil {
				k.conn.Close()
			}
		}
	}()
	for _, v := range children {
		n := src.plan.nodes[v-1]
		c, err := dolly.DialData(ctx, n.dataAddr, deadline)
		if err != nil {
			src.cutOff(v, fmt.Sprintf("dolly-server cannot connect to it at %s: %v", n.dataAddr, err))
			continue
		}
		sinks = append(sinks, &sink{v: v, node: n, conn: c})
	}
	hb := src.enc.Header().MarshalBinary()
	src.write(sinks, hb, nil)
	pace := newPacer(s.cfg.MaxRate)
	for {
		c, err := src.enc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("image %s: %w", s.cfg.Image, err)
		}
		if c.Kind == dolly.FrameEnd {
			src.digest <- src.enc.Digest()
		}
		if !src.write(sinks, c.Header, c.Payload) {
			return errors.New("no node is left to send to")
		}
		n := len(c.Header) + len(c.Payload)
		src.sent.Add(int64(n))
		if err := pace.wait(ctx, n); err != nil {
			return err
		}
	}
	for _, k := range sinks {
		if k.conn != nil {
			k.conn.(interface{ CloseWrite() error }).CloseWrite()
		}
	}
	return nil
}

// write sends one frame to every live child and reports whether any is left.
func (src *source) write(sinks []*sink, header, payload []byte) bool {
	alive := false
	for _, k := range sinks {
		if k.conn == nil {
			continue
		}
		bufs := net.Buffers{header, payload}
		if _, err := bufs.WriteTo(k.conn); err != nil {
			k.conn.Close()
			k.conn = nil
			src.cutOff(k.v, fmt.Sprintf("sending to it failed: %v", err))
			continue
		}
		alive = true
	}
	return alive
}

// cutOff fails vertex v, whose stream cannot be delivered, and aborts the
// nodes below it, which would otherwise wait for a stream that never comes.
func (src *source) cutOff(v int, reason string) {
	s := src.s
	for i, n := range src.plan.subtree(v) {
		r := reason
		if i > 0 {
			r = fmt.Sprintf("upstream %s was cut off", src.plan.name(v))
		}
		s.nodeFailed(n, r)
		n.conn.Send(dolly.Message{Type: dolly.MsgAbort, Reason: r})
	}
}

// snapshot copies what the progress view needs.
func (s *Server) snapshot(p castPlan) []nodeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]nodeView, len(p.nodes))
	for i, n := range p.nodes {
		v := nodeView{name: n.name, status: n.status, written: n.progress.Written, rate: n.rate, reason: n.reason, verified: n.verified}
		end := now
		if !n.end.IsZero() {
			end = n.end
		}
		v.elapsed = end.Sub(n.start)
		out[i] = v
	}
	return out
}

// decodeFactor is how fast the image decodes against the probes' standard
// sample, both timed on the server. 1 when either is unknown.
func decodeFactor(p imaging.Profile, server capacity.Probe) float64 {
	std := server.DecompressBytesPerSec[p.Codec.String()]
	if p.DecodeRate <= 0 || std <= 0 {
		return 1
	}
	return p.DecodeRate / std
}

// scaleDecode scales every host's decoding rate for codec by f.
func scaleDecode(net *capacity.Network, codec string, f float64) {
	for i := range net.Hosts {
		rates := net.Hosts[i].Resources.CPU.Decompress
		if v, ok := rates[codec]; ok {
			scaled := maps.Clone(rates)
			scaled[codec] = v * f
			net.Hosts[i].Resources.CPU.Decompress = scaled
		}
	}
}
