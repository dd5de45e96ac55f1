package server

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/imaging"
)

// The nodes of a crowded machine decode a compressed cast all at once,
// which the one node that probed the machine alone did not: their decoders
// share the memory system, and on the lab's VM four at once on 2 cores ran
// about 10% slower each than one alone. That probe also ran seconds before
// the cast, on cores whose speed varies from moment to moment: the same
// decoder, timed by its thread's clock, ran at 1.2 to 2.2 GB/s from one
// minute to the next (a VM's host runs other work beside it). So where a
// plan may have the nodes decode zstd, some nodes of a crowded machine
// decode the standard sample at once just before the plan (as many as
// take turns on each core, see decodersPerCore), each timed by its
// thread's clock; their bytes over their CPU time is the machine's
// decoding rate per core in a crowd. Over the 45 joins of a full make
// bench (4 to 24 nodes) it came to 0.56-1.32 times the lone figure, 0.9
// times at the median. Yet a short window is a moment of the machine
// too: over 17 casts of the zstd chain of 8 at 1 Gbit/s where the crowd
// counted alone (7 with this window, 10 with one of 200 ms), it read
// 0.59-1.71 times the lone figure; the casts where it read below 0.8 ran
// 16% faster than their previews on average, those where it read above
// 1.15 ran 7% slower. So the model counts the mean of the two costs a
// byte (decodeCrowd.counted): two measurements of one thing, a few
// seconds apart.

// decodeCrowdSettle is how long after the order to decode the window
// opens, for every decoding thread to have run; decodeCrowdWindow is the
// window. Each node times its own thread, so the window needs to be no
// longer than it takes each to decode a few megabytes.
const (
	decodeCrowdSettle = 20 * time.Millisecond
	decodeCrowdWindow = 60 * time.Millisecond
)

// decodersPerCore is how many nodes of a crowded machine decode at once,
// per core. Decoders slow each other down only while they run at once, at
// most one on each core, and take turns on a core as the cast's do; more
// of them would only cost the join their setting up (compressing the
// sample, about 10 ms each).
const decodersPerCore = 2

// decoderCrowds picks, of every crowded machine's nodes, those that decode
// at once: decodersPerCore for each of its cores (alone has its probe).
func decoderCrowds(crowded map[string][]*nodeState, alone map[string]*capacity.Probe) map[string][]*nodeState {
	picked := map[string][]*nodeState{}
	for m, nodes := range crowded {
		most := len(nodes)
		if p := alone[m]; p != nil && p.Cores > 0 {
			most = min(most, decodersPerCore*p.Cores)
		}
		picked[m] = nodes[:most]
	}
	return picked
}

// decodeCrowd is what one crowded machine's nodes decoded at once.
type decodeCrowd struct {
	nodes int // that decoded
	cores int
	rate  float64 // bytes decoded per CPU second, all of them together
	alone float64 // the lone probe's rate on the same sample; 0 if unknown
}

// decodeCrowds is what each machine's nodes decoded at once, by machine;
// notes gets why a machine has none.
func decodeCrowds(pushed crowdAnswers, machines map[string][]*nodeState, alone map[string]*capacity.Probe, notes *[]string) map[string]decodeCrowd {
	found := map[string]decodeCrowd{}
	for m, nodes := range machines {
		if why := pushed.missing(m, nodes); why != "" {
			*notes = append(*notes, "decoders: "+why)
			continue
		}
		var bytes int64
		var cpu float64
		for _, r := range pushed.results[m] {
			bytes += r.Bytes
			cpu += r.CPU
		}
		if bytes <= 0 || !(cpu > 0) {
			*notes = append(*notes, fmt.Sprintf("the %s on one machine decoded nothing at once: the model counts what one decoded alone", plural(len(nodes), "node")))
			continue
		}
		d := decodeCrowd{nodes: len(nodes), rate: float64(bytes) / cpu}
		if p := alone[m]; p != nil {
			d.alone, d.cores = p.DecompressBytesPerSec[imaging.Zstd.String()], p.Cores
		}
		found[m] = d
	}
	return found
}

// counted is the decoding rate per core the model counts for the
// machine's nodes: that of the mean of the crowd's and the lone decoder's
// costs a byte, or the crowd's where the lone one is unknown.
func (d decodeCrowd) counted() float64 {
	if !(d.alone > 0) || !(d.rate > 0) {
		return d.rate
	}
	return 2 / (1/d.rate + 1/d.alone)
}

// note says what the model takes from d, for the preview.
func (d decodeCrowd) note() string {
	note := fmt.Sprintf("%s of one machine of %s decoded zstd at once: %s MB/s a core each", plural(d.nodes, "node"), plural(d.cores, "core"), mbps(d.rate))
	if !(d.alone > 0) {
		return note + "; the model counts it"
	}
	return note + fmt.Sprintf(", %.2f× what one decoded alone; the model counts the mean of the two costs a byte, %s MB/s a core",
		d.rate/d.alone, mbps(d.counted()))
}

// crowdDecoders gives the nodes' probes (probes[1:]; probes[i] runs on
// machineOf[i]) on machines whose nodes decoded at once the zstd rate the
// model counts there (decodeCrowd.counted), and their rate for RLE
// blocks, which fills memory the same crowd shares, scaled alike.
func crowdDecoders(probes []capacity.Probe, machineOf []string, decoders map[string]decodeCrowd) {
	for i := 1; i < len(probes); i++ {
		d, ok := decoders[machineOf[i]]
		p := &probes[i]
		own := p.DecompressBytesPerSec[imaging.Zstd.String()]
		if !ok || !(own > 0) {
			continue
		}
		rates := maps.Clone(p.DecompressBytesPerSec)
		rates[imaging.Zstd.String()] = d.counted()
		p.DecompressBytesPerSec = rates
		p.RLEDecodeBytesPerSec *= d.counted() / own
	}
}

// decodeOrder is a node's order in a decoders' crowd: set up under id, or
// with push decode.
func decodeOrder(id uint64, push bool) control.CrowdProbe {
	o := control.CrowdProbe{ID: id, Decode: true}
	if push {
		o.Go = true
		o.SettleMillis, o.WindowMillis = int(decodeCrowdSettle.Milliseconds()), int(decodeCrowdWindow.Milliseconds())
	}
	return o
}

// nodesMayDecode says whether a plan of this cast may have the nodes
// decode zstd (see unusedDecoders).
func (s *Server) nodesMayDecode() bool {
	return !slices.Contains(s.unusedDecoders(), imaging.Zstd.String())
}
