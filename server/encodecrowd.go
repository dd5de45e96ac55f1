package server

import "fmt"

// The source compresses a raw image on the fly among the nodes of its
// machine where they share it (the demo, an emulated lab): its encoder
// then shares the cores' caches and memory with their decoders and
// writers, which its timing alone, before any node joined, did not. In
// five 4-node casts at 1 Gbit/s in the lab the compressing path cost the
// source 1.0-1.3 times its CPU a byte alone, and those casts, bound by
// the machine's CPU, ran 9-27% below their previews. So the encoder is
// timed again on the same pieces of the image while the decoders' crowd
// decodes (probe.EncodeCrowd). That window is a moment of the machine, as
// the decoders' is: over 10 joins of that lab it read 0.94-1.65 times the
// cost alone. So, as for the decoders (see decodeCrowd.counted), the
// model counts the mean of the two costs a byte. The lab's -auto row of 4
// nodes at 1 Gbit/s (the median of 5 casts) then came out -1.8%, +5.8%
// and +11.6% from its casts, where the build before gave +17.0%, +13.8%,
// +7.6%, +11.6%, +13.1% and +4.7% the same hour.

// encodeAmong times the source's encoder while decoders, the nodes of its
// machine, decode at once, and sends how many times its cost alone it
// took (0 when not timed).
func (s *Server) encodeAmong(decoders []*nodeState) <-chan float64 {
	done := make(chan float64, 1)
	if s.encodeCrowd == nil || len(decoders) == 0 {
		done <- 0
		return done
	}
	go func() {
		slowdown, err := s.encodeCrowd.PushFor(decodeCrowdSettle, decodeCrowdWindow)
		if err != nil {
			s.log.Warn("timing the encoder among the decoders", "err", err)
		}
		done <- slowdown
	}()
	return done
}

// crowdedEncodeRate is the encoding rate the model counts: that of the
// mean of the whole path's cost a byte alone (rate) and among the
// decoders (slowdown times it), or rate where the crowd was not timed.
func crowdedEncodeRate(rate, slowdown float64) float64 {
	if !(slowdown > 0) {
		return rate
	}
	return 2 * rate / (1 + slowdown)
}

// encodeCrowdNote says what the model takes from the encoder's crowd.
func encodeCrowdNote(decoders int, slowdown, rate float64) string {
	return fmt.Sprintf("the source's encoder, timed again while %s of its machine decoded at once, took %.2f× its CPU a byte alone; the model counts the mean of the two costs a byte: the source compresses at %s MB/s a core",
		plural(decoders, "node"), slowdown, mbps(crowdedEncodeRate(rate, slowdown)))
}
