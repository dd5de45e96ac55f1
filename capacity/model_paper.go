package capacity

// paperLimits is the extended model of the paper (sections 2.5–2.7) for the
// 2000-era Dolly client over a one-copy TCP stack. Every active node, the
// source included, is N(1,o,1): one inbound stream, o outbound streams and
// one disk transfer. For the source the inbound stream is the image read
// from its store; that is how the paper's star predictions (Table I) come
// out, see docs/capacity-model.md.
//
// Raw stream, per node:
//
//	disk      b ≤ disk
//	I/O bus   (1 + o + 1)·b ≤ bus                    (NIC in, NIC out ×o, disk)
//	memory    (1 + o + 1 + 2(o+2))·b ≤ memory        (DMAs, and o+2 copies read and written)
//	CPU       ((1+o)/net + 1/disk + (o+2)/copy)·b ≤ 1
//
// The o+2 copies are the receive copy into the process, one copy per child
// send and one for the disk write.
//
// Compressed with factor c, the node forwards the compressed stream and
// decompresses only for its own write through a pipe to a decompressor:
// network streams and the o+2 copies carry b/c, one more copy carries the
// decompressed b, and the decompressor costs c/decompress. The paper's
// section 2.7 writes that term as c/10 (not 1/10 for the b raw bytes it
// outputs); it is kept as written so that the model reproduces the
// paper's 3.9 MB/s.
func paperLimits(h *hostLimits, r Resources, source bool, out int, comp stream) error {
	compressed := comp.Enabled()
	flow := Flow{Source: source, In: 1, Out: out, Disk: true, Decompress: compressed}
	o := float64(out)
	wire := comp.wire()

	streams := (1 + o) * wire // network streams, in and out
	copies := (o + 2) * wire  // copies of the stream as it arrives
	rawCopies := 0.0          // copies of decompressed data
	var decompress float64    // CPU share of the decompressor
	if compressed {
		rate, err := r.decompressRate(comp.Codec)
		if err != nil {
			return err
		}
		rawCopies = 1
		decompress = comp.factor() / rate // the paper's c/10
	}

	h.add(DiskLimit, flow, 1, r.Disk)
	h.add(IOBusLimit, flow, streams+1, r.IOBus)
	h.add(MemoryLimit, flow, streams+1+2*(copies+rawCopies), r.Memory)
	cpu := streams*share(r.CPU.Net) + share(r.CPU.Disk) + (copies+rawCopies)*share(r.CPU.Copy) + decompress
	h.add(CPULimit, flow, cpu, r.cores())
	return nil
}
