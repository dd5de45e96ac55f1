package capacity

// dollyLimits models dolly's own data path; docs/capacity-model.md derives it.
func dollyLimits(h *hostLimits, r Resources, source bool, out int, st stream) error {
	if source {
		return dollySourceLimits(h, r, out, st)
	}
	return dollyNodeLimits(h, r, out, st)
}

// dollyNodeLimits covers a receiving node. The relay splices the inbound
// TCP stream into a pipe, tee(2)s it to one pipe per child and splices
// those to the child sockets: the kernel moves page references, no byte is
// copied by the CPU. One more pipe takes the node's own copy, which it
// read(2)s (one copy), checks frame by frame with CRC32C (one read pass
// over the bytes as sent, made on each round as it lands, in the cache)
// and write(2)s to the target (one copy into the
// page cache, then the disk's DMA). The content digest of a raw stream is
// made of the frames' CRCs, no pass of its own. Zero runs are neither sent
// nor written: the node zeroes the range. A compressed stream is forwarded
// as it is and decompressed only for the local write; the decoded bytes
// are gathered into chunks (one copy), scanned for zero runs (one pass)
// and digested (one more).
//
// With w the wire bytes and d the data bytes per raw byte (w = d for a raw
// stream, 1/c compressed), o children and b in raw bytes/s:
//
//	disk      (d [+ z])·b ≤ disk write rate
//	I/O bus   ((1+o)·w + d [+ z])·b ≤ bus
//	          where z is the share the node zeroes, when its disk zeroes
//	          by writing zeros (a hard disk; an SSD zeroes in place)
//	memory    ((1+o)·w + 2w + w + 2d + d [+ w + d + 2 + 1 + d])·b ≤ memory
//	          NIC DMAs, read copy, CRC, write copy, disk DMA [decoder in/out, gather copy, zero scan, digest];
//	          for zstd [w + s + 2d + s + d], s the share it decodes (below)
//	CPU       ((1+o)·w/net + w/copy + w/digest + d/write
//	           [+ 1/decompress + w/copy + s + d/digest + d/copy])·b ≤ cores
//	          where write is the probed write path (disk CPU rate, the kernel
//	          threads' share included), else the copy rate; where the
//	          relay's path was probed whole (relay, for one child), it stands
//	          for the first three terms: (w/relay + (o-1)·w/net) at least w/(2·relay),
//	          and decompress the decoder's rate in raw bytes of this image (zero
//	          runs included: they decode fast, but not for free); s, the
//	          zero scan, is u/digest for zstd, u the share it decodes (its
//	          decoder writes in place and hands on zero frames and the zeros
//	          deep in a run of RLE blocks undecoded), 1/copy + 1/digest for
//	          gzip (its output is gathered, then scanned whole);
//	          plus w·pace, what the stream it receives costs more at the
//	          pace of the node's link than over loopback (Resources.paceCost;
//	          the streams it sends cost no more)
//	decoding thread, when decompression cannot spread over cores: the one
//	goroutine that decodes also copies the payloads in, scans, digests and copies into the
//	target's aligned chunks (which are written behind it, so the disk's time
//	is not its own), but for what it decoded a zstd frame at a time, whole,
//	into one (a target written with O_DIRECT; a stream compressed on the fly,
//	a stored image's frames of a chunk or less):
//	          (1/decompress + w/copy + s + d/digest + d/copy)·b ≤ 1
func dollyNodeLimits(h *hostLimits, r Resources, out int, st stream) error {
	compressed := st.Enabled()
	flow := Flow{In: 1, Out: out, Disk: true, Decompress: compressed}
	o := float64(out)
	w, d := st.wire(), st.data()

	memory := (1+o)*w + 2*w + w + 2*d + d
	// The write path's cost (the copy into the page cache, the filesystem
	// or block layer, writeback) is what a probe measures as the disk's CPU
	// rate; without it, the copy alone is counted.
	write := share(r.CPU.Disk)
	if write == 0 {
		write = share(r.CPU.Copy)
	}
	cpu := (1+o)*w*share(r.CPU.Net) + w*share(r.CPU.Copy) + w*share(r.CPU.Digest) + d*write
	if r.CPU.Relay > 0 {
		// Measured whole for one child: each other child adds a stream
		// (a leaf saves one, but never half of the path).
		path := share(r.CPU.Relay)
		path = max(path+(o-1)*share(r.CPU.Net), path/2)
		cpu = w*path + d*write
	}
	cpu += w * r.paceCost()
	behind := d * write // what the node writes, it writes from its buffer
	if compressed {
		rate, err := r.decompressRate(st.Codec)
		if err != nil {
			return err
		}
		// zstd's decoder hands on zero frames and the zeros deep in a run
		// of RLE blocks undecoded: they are neither written out nor
		// gathered nor scanned.
		if st.Codec == "zstd" {
			s := st.scanned()
			memory += w + s + 2*d + s + d
		} else {
			memory += w + d + 2 + 1 + d
		}
		// The decoder's thread also copies the payloads into the decoder,
		// scans what it decodes for zero runs, digests the data and copies
		// it into the target's aligned chunks: all of it counts against
		// the cores too. zstd's decoder writes from its window, where the
		// scan reads it, and hands on the runs of its zero frames and the
		// zeros deep in a run of RLE blocks undecoded, unscanned
		// (stream.scanned). gzip's output is gathered first, and scanned
		// whole.
		scan := st.scanned() * share(r.CPU.Digest)
		if st.Codec != "zstd" {
			scan = share(r.CPU.Copy) + share(r.CPU.Digest)
		}
		// A frame decoded whole into the target's own buffer is not copied
		// into one.
		align := d * share(r.CPU.Copy)
		if r.DirectWrites {
			align = st.alignedCopies() * share(r.CPU.Copy)
		}
		thread := st.decodeWeight()/rate + w*share(r.CPU.Copy) + scan + d*share(r.CPU.Digest) + align
		cpu += thread
		behind += thread
		if !r.ParallelDecompress {
			h.add(DecompressLimit, flow, thread, 1)
		}
	}
	// A disk that zeroes by writing writes the zero runs the node zeroes
	// too (the kernel's zero pages: no copy, but the disk's time).
	written := d
	if r.ZeroesByWriting {
		written += st.zeroedShare()
	}
	h.add(DiskLimit, flow, written, r.Disk)
	h.add(IOBusLimit, flow, (1+o)*w+written, r.IOBus)
	h.add(MemoryLimit, flow, memory, r.Memory)
	h.addBehind(CPULimit, flow, cpu, behind, r.cores())
	return nil
}

// dollySourceLimits covers dolly-server. It reads the stored image (the
// disk's DMA and one read copy) and write(2)s every frame into a pipe,
// which its relay splices (and tees) to each child socket and copies into
// its history, as a node's relay does; without that path's own figure, a
// copy and a stream per child stand for it. What lies between the read
// and the pipe depends on how the image is stored and sent, with s the
// stored bytes per raw byte:
//
//	raw as raw:           scan what is read for zero runs (s: all of it, less a sparse file's holes),
//	                      CRC the data (d; the digest takes the frames' CRCs)
//	compressed as stored: CRC the frames (w)
//	raw, compressed here: (s: 1, of which the disk reads all but the holes)
//	                      digest the data (d), compress it (d/compress), CRC (w); one thread
//	                      reads, digests and compresses the stream, so that is one core's work
//	compressed, sent raw: decompress (1/decompress, one stream), scan for zero runs (1), CRC (d)
//
//	disk      s·b ≤ disk read rate
//	I/O bus   (s + o·w)·b ≤ bus
//	memory    (s + 2s + passes + 2·o·w + o·w)·b ≤ memory
//	CPU       (s/read + passes/digest + [convert] + o·w/copy + o·w/net)·b ≤ cores
//	          where read is the probed read through the page cache, else
//	          the copy rate; where the source's path was probed whole
//	          (feed, for one child: the frames' write into the relay's pipe,
//	          its splices and tee, its history and the send), it stands for
//	          the last two terms: w/feed + (o-1)·w/net
func dollySourceLimits(h *hostLimits, r Resources, out int, st stream) error {
	flow := Flow{Source: true, Out: out, Disk: true}
	o := float64(out)
	w, d := st.wire(), st.data()

	stored := w // as sent: the stored bytes are the wire bytes...
	if !st.Enabled() {
		// ...but a raw image is read whole, zero runs included, except
		// the holes of a sparse file
		stored = 1 - st.unreadHoles()
	}
	var passes, convert float64
	holes := 0.0 // of what is read, what comes off no disk
	switch st.conversion() {
	case "compress":
		// The compressor takes every raw byte, but the file's holes (and
		// the blocks a map leaves out) come off no disk.
		stored, holes = 1, st.unreadHoles()
		rate, err := r.compressRate(st.Codec)
		if err != nil {
			return err
		}
		passes = d + w
		convert = d / rate
		h.add(CompressLimit, flow, stored*r.readCost()+d*share(r.CPU.Digest)+convert, r.compressThreads())
	case "decompress":
		stored = st.storedBytes()
		rate, err := r.decompressRate(st.stored.Codec)
		if err != nil {
			return err
		}
		passes = 1 + d
		convert = st.decodeWeight() / rate
		h.add(DecompressLimit, flow, convert, 1) // one stream decodes on one core
	default:
		if st.Enabled() {
			passes = w
		} else {
			passes = stored + d // scan what is read, CRC the data once
		}
	}
	read := stored - holes
	h.add(DiskLimit, flow, read, r.Disk)
	h.add(IOBusLimit, flow, read+o*w, r.IOBus)
	h.add(MemoryLimit, flow, 3*stored+passes+3*o*w, r.Memory)
	send := o*w*share(r.CPU.Copy) + o*w*share(r.CPU.Net)
	if r.CPU.Feed > 0 && out > 0 {
		// Measured whole for one child: each other child adds a stream
		// (the relay tees the pipe to it), as at a node.
		send = w * (share(r.CPU.Feed) + (o-1)*share(r.CPU.Net))
	}
	cpu := stored*r.readCost() + passes*share(r.CPU.Digest) + convert + send
	h.add(CPULimit, flow, cpu, r.cores())
	return nil
}

// readCost is the CPU share per byte the source's read of its stored image
// costs: the probed read through the page cache, else a copy.
func (r Resources) readCost() float64 {
	if r.CPU.Read > 0 {
		return share(r.CPU.Read)
	}
	return share(r.CPU.Copy)
}
