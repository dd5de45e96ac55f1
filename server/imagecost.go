package server

import (
	"maps"

	"dolly/capacity"
	"dolly/dolly/probe"
)

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
