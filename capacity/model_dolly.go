package capacity

// dollyLimits models dolly's own data path; see README.md for the figures.
func dollyLimits(h *hostLimits, r Resources, source bool, out int, comp Compression) error {
	if source {
		dollySourceLimits(h, r, out, comp)
		return nil
	}
	return dollyNodeLimits(h, r, out, comp)
}

// dollyNodeLimits covers a receiving node. The relay splices the inbound
// TCP stream into a pipe, tee(2)s it to one pipe per child and splices
// those to the child sockets: the kernel moves page references, no byte is
// copied by the CPU. One more tee goes to a local pipe that the node
// read(2)s (one copy), checks frame by frame with CRC32C (one read pass,
// over the bytes as sent) and write(2)s to the target (one copy into the
// page cache, then the disk's DMA). A compressed stream is forwarded as it
// is and decompressed only for the local write.
//
// With w = 1 (raw) or 1/c (compressed), o children and b in raw bytes/s:
//
//	disk      b ≤ disk write rate
//	I/O bus   ((1+o)·w + 1)·b ≤ bus
//	memory    ((1+o)·w + 2w + w [+ w + 1] + 2 + 1)·b ≤ memory
//	          NIC DMAs, read copy, CRC pass, [decompress: read w, write 1], write copy, disk DMA
//	CPU       ((1+o)·w/net + w/copy + w/digest [+ 1/decompress] + 1/copy + 1/disk)·b ≤ cores
//	decompression on one core, unless parallel: b/decompress ≤ 1
func dollyNodeLimits(h *hostLimits, r Resources, out int, comp Compression) error {
	compressed := comp.Enabled()
	flow := Flow{In: 1, Out: out, Disk: true, Decompress: compressed}
	o := float64(out)
	w := comp.wire()

	memory := (1+o)*w + 2*w + w + 2 + 1
	cpu := (1+o)*w*share(r.CPU.Net) + w*share(r.CPU.Copy) + w*share(r.CPU.Digest) +
		share(r.CPU.Copy) + share(r.CPU.Disk)
	if compressed {
		rate, err := r.decompressRate(comp.Codec)
		if err != nil {
			return err
		}
		memory += w + 1
		cpu += 1 / rate
		if !r.ParallelDecompress {
			h.add(DecompressLimit, flow, 1/rate, 1)
		}
	}
	h.add(DiskLimit, flow, 1, r.Disk)
	h.add(IOBusLimit, flow, (1+o)*w+1, r.IOBus)
	h.add(MemoryLimit, flow, memory, r.Memory)
	h.add(CPULimit, flow, cpu, r.cores())
	return nil
}

// dollySourceLimits covers dolly-server. For a raw image it reads the file
// (the disk's DMA and one read copy), scans it for zero runs and computes
// each frame's CRC32C (two read passes at the digest rate) and write(2)s
// every frame to each child socket (one copy per child). A compressed
// image is only read and sent, all at b/c.
//
//	disk      w·b ≤ disk read rate
//	I/O bus   (1 + o)·w·b ≤ bus
//	memory    raw: (1 + 2 + 1 + 1 + 2o + o)·b     compressed: (1 + 2 + 2o + o)·w·b
//	CPU       raw: ((1+o)/copy + 2/digest + o/net + 1/disk)·b
//	          compressed: ((1+o)/copy + o/net + 1/disk)·w·b ≤ cores
func dollySourceLimits(h *hostLimits, r Resources, out int, comp Compression) {
	flow := Flow{Source: true, Out: out, Disk: true}
	o := float64(out)
	w := comp.wire()

	memory := (1 + 2 + 2*o + o) * w
	cpu := ((1+o)*share(r.CPU.Copy) + o*share(r.CPU.Net) + share(r.CPU.Disk)) * w
	if !comp.Enabled() {
		memory += 1 + 1 // zero-run scan and CRC pass
		cpu += 2 * share(r.CPU.Digest)
	}
	h.add(DiskLimit, flow, w, r.Disk)
	h.add(IOBusLimit, flow, (1+o)*w, r.IOBus)
	h.add(MemoryLimit, flow, memory, r.Memory)
	h.add(CPULimit, flow, cpu, r.cores())
}
