package server

import (
	"time"

	"dolly/dolly/control"
	"dolly/dolly/relay"
	"dolly/imaging"
)

// A crowded machine (more of the cast's hosts than cores, see
// crowdedMachines) runs its nodes on fewer threads than cores, and its
// relays wake for larger batches where its CPU holds the plan back: what
// each process spends looking for work, the cast does not get.

// shareCores tells the nodes of every crowded machine (crowdedMachines:
// more of the cast's hosts than cores) to run their Go code on one thread
// at a time (see control.Share), before the network and crowd probes, so
// that those measure the nodes as a raw cast runs them (a compressed one
// gives them a second thread: shareForCast). A node's own probe ran
// before, on all cores, but it times its work on one thread. A node that
// has left makes Send fail, which its own connection's reader reports.
func (s *Server) shareCores(ready []*nodeState) {
	crowded, alone := s.crowdedMachines(ready)
	_, s.crowdedHere = crowded[s.sourceMachine(ready)]
	share := control.Share{Procs: 1} // more hosts than cores: less than one each
	for m, nodes := range crowded {
		for _, n := range nodes {
			n.conn.Send(control.Message{Type: control.MsgShare, Share: &share})
			if s.sharing == nil {
				s.sharing = map[*nodeState]int{}
			}
			s.sharing[n] = alone[m].Cores
		}
	}
}

// shareSourceCores keeps the source to one thread for the cast where its
// machine is crowded (crowdedHere) and it sends the image as stored, as
// the nodes there cast a raw stream: it then only reads, frames and hands
// the stream on, and a second thread mostly looks for work, which the
// machine's cores pay for. In the emulated lab's raw chain of 4 on
// unshaped links (5 hosts on 2 cores), runs taken in turns, the source
// spent a median of 343 ms of CPU a cast on both cores (13 casts) and 323
// ms on one (15), where its probes count about 280; the casts' rates
// stayed within their noise (medians of 955-1166 MB/s, against 1027-1253).
// A source that compresses or decodes the stream keeps its threads. It
// returns what puts the threads back.
func (s *Server) shareSourceCores(send imaging.Encoding) (restore func()) {
	if !s.crowdedHere || s.cfg.SetProcs == nil || send != s.img.Encoding {
		return func() {}
	}
	was := s.cfg.SetProcs(1)
	if was <= 1 {
		return func() {}
	}
	s.log.Info("the source casts on one thread: its machine's cores hold the cast back", "was", was)
	return func() { s.cfg.SetProcs(was) }
}

// decodeProcs is how many threads a node of a crowded machine casts a
// compressed stream on. Its decoding runs for milliseconds at a time (a
// frame of stream is several of image), and on one thread the node's
// relay waits for its turn behind it: each hop of a chain then holds the
// stream that much longer, and the tail ends that much later. With a
// second thread the relay waits in the kernel, which wakes it as the
// bytes come. In the emulated lab (zstd chain of 24 at 100 Mbit/s, 25
// hosts on 2 cores) the stream in flight between the first node and the
// last came to 14-18 MB on one thread and 6-11 MB on two, and the cast
// took 8.6-9.0 s against 8.2-8.6 s. A raw stream's nodes do little
// between hand-offs, where a second thread only spins: one thread kept
// the near side of the two-switch lab's raw chain at 94% and 99% of a
// single switch's rate, against 86% and 92% on two. A third thread (the
// machine's 2 cores overcommitted) kept the zstd chain of 24 at 84.1% of
// the chain of 8, against 84.5% on two (one run each, back to back).
const decodeProcs = 2

// shareForCast tells the nodes shareCores kept to one thread how many
// they cast on: decodeProcs, at most their machine's cores, where the
// plan's stream is compressed; and how long their relays gather their
// upstream's stream before they wake, where wake says (see wakeFor). It
// goes before their places, so that each casts from the start as it will
// go on.
func (s *Server) shareForCast(send imaging.Encoding, wake time.Duration) {
	for n, cores := range s.sharing {
		var share control.Share
		if procs := min(decodeProcs, cores); send.Compressed() && procs > 1 {
			share.Procs = procs
		}
		share.WakeMillis = int(wake.Milliseconds())
		if share != (control.Share{}) {
			n.conn.Send(control.Message{Type: control.MsgShare, Share: &share})
		}
	}
}

// wakeFor is how long the relays of ch's crowded machines gather their
// upstream's stream before they wake (relay.Config.WakeDelay): longer than
// their default where a shared machine's CPU holds the plan back, or
// nearly, for fewer wake-ups leave more of it to the cast; their default
// (0) where the links hold it back, as every hop of a chain holds the
// stream that long. In the emulated lab at 100 Mbit/s (25 hosts on 2 cores,
// eight casts each) the zstd chain of 24, bound by the machine's cores,
// ran at 116.6-128.7 MB/s where it ran at 105.7-124.9 on the default (a
// mean of 123.2 against 116.5); the raw chain of 24, bound by its links,
// ran at 21.8-22.4 with the larger batches where it ran at 22.9.
func wakeFor(ch Choice) time.Duration {
	if !ch.Modeled || !(ch.Result.Rate > 0) {
		return 0
	}
	if ch.Result.CrowdedWake() {
		return relay.CrowdedWakeDelay
	}
	return 0
}
