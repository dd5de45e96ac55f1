package capacity

import "fmt"

// NodeModel names the way a host's own limits are modelled.
type NodeModel string

const (
	// ModelBasic is the paper's basic model: one switching capacity shared
	// by every stream the node handles, (in + out + disk)·b ≤ switching.
	ModelBasic NodeModel = "basic"
	// ModelPaper is the paper's extended model (sections 2.5–2.7): disk,
	// I/O bus, memory system and CPU shares for the 2000-era Dolly client
	// with a one-copy TCP stack. Every active node, the source included,
	// is modelled as N(1,o,1).
	ModelPaper NodeModel = "paper"
	// ModelDolly models dolly's own data path: splice/tee relays, one
	// read copy and one write copy for the local disk, a CRC32C pass and
	// parallel decompression; the source reads, digests and writes to
	// each child socket. Its figures come from probes.
	ModelDolly NodeModel = "dolly"
)

// Resources are the limits of one host. Rates are in bytes per second.
// A zero rate or capacity means "not modelled": its term or constraint is
// left out, so a probe that could not measure something adds no limit.
type Resources struct {
	Model NodeModel

	// Switching is the basic model's total switching capacity of the node.
	Switching float64

	// Disk is the sequential rate of the disk the host uses in the cast:
	// the target's write rate on a node, the image store's read rate on
	// the source.
	Disk float64
	// ZeroesByWriting: the node's disk zeroes a range by writing it (see
	// Probe.ZeroesByWriting), so the zero runs it zeroes cost Disk too.
	ZeroesByWriting bool
	// DirectWrites: the node writes its target with O_DIRECT (see
	// Probe.DirectWrites), from aligned buffers.
	DirectWrites bool
	// IOBus is the I/O bus capacity (the paper's 132 MB/s PCI).
	IOBus float64
	// Memory is the memory system capacity: bytes moved to and from
	// memory per second (a copy moves every byte twice).
	Memory float64
	// Cores is the CPU capacity in cores; CPU shares must sum to at most
	// this. Zero means one core.
	Cores float64
	// CompressThreads is how many threads compress a raw image on the fly
	// at the source, each a chunk of its own; 0 counts one.
	CompressThreads int
	// ParallelDecompress spreads decompression over all cores. Without it
	// decompression must also fit on one core.
	ParallelDecompress bool

	// CPU gives, per kind of stream, the rate one core reaches doing only
	// that work; 1/rate is the CPU share one byte per second costs.
	CPU CPURates
}

// CPURates are the rates one core reaches doing one kind of work alone,
// in bytes per second (the paper's a1…an).
type CPURates struct {
	Net float64 // send or receive one stream through the kernel's network stack
	// Relay is a chain node's whole data path, but for the target's write:
	// its stream in and out, the relay's splices, the copy into its history
	// and the check. Zero: the sum of the Net, Copy and Digest terms.
	Relay float64
	// Link is a stream received and one sent at the pace of the host's
	// link, through read(2) and write(2), per byte each way: a link
	// spreads the packets out, so that each wake-up carries less than over
	// loopback, where Net and Relay are measured, and a byte costs more.
	// What it costs beyond two streams and two copies is added to the
	// stream the host receives (see Resources.paceCost). Zero: not
	// measured.
	Link float64
	// Feed is the source's data path for one child, as Relay is a
	// node's: the encoder's write of its frames into a pipe, the relay's
	// splices and tee, the copy into its history and the send. Zero: a
	// copy and a stream per child.
	Feed float64
	// Read is the source's read of its stored image through the page
	// cache, which walks pages and costs several copies' worth on a busy
	// machine. Zero: a copy.
	Read   float64
	Disk   float64 // drive one disk transfer (the paper's 80 MB/s SCSI)
	Copy   float64 // memory-to-memory copy (read(2), write(2), pipes)
	Digest float64 // CRC32C or zero-run scan: one read pass over the data
	// Decompress maps a codec ("gzip", "zstd") to its output rate.
	Decompress map[string]float64
	// DecompressRLE is the output rate of zstd's RLE blocks alone, which
	// a decoder fills byte by byte at a speed of its own. The model reads
	// Decompress only: whoever scales it to an image's decoding speed may
	// weigh this in for the image's RLE blocks. Zero: not measured.
	DecompressRLE float64
	// Compress maps a codec to the rate the source compresses raw data at
	// when a plan sends a raw image compressed (input bytes per second).
	Compress map[string]float64
}

// paceCost is the CPU share per byte that a stream received at the pace of
// the host's link costs beyond its loopback figures: what the link's
// stream in and out cost beyond two streams and two copies
// (CPURates.Link). The receiver pays it, not the sender: a link spreads
// the packets out, and each arrival wakes the receiver (and everything
// behind it) for less, while the sender hands the kernel whole buffers.
// Over a veth shaped to 1 Gbit/s one stream's receiver took 0.74-0.86 ns
// of its CPU a byte, its sender 0.16-0.20; in the lab's chains the
// relays, which send one stream more than the tail, took 0.1 ns more a
// byte sent, not the 0.6 an even split counted. 0 when not measured, or
// when the link costs no more.
func (r Resources) paceCost() float64 {
	if r.CPU.Link <= 0 {
		return 0
	}
	return max(0, share(r.CPU.Link)-2*share(r.CPU.Net)-2*share(r.CPU.Copy))
}

// compressThreads returns how many threads compress, at least one.
func (r Resources) compressThreads() float64 {
	return float64(max(r.CompressThreads, 1))
}

// cores returns the CPU capacity, one core when unset.
func (r Resources) cores() float64 {
	if r.Cores <= 0 {
		return 1
	}
	return r.Cores
}

// decompressRate returns the decompression rate for codec.
func (r Resources) decompressRate(codec string) (float64, error) {
	v, ok := r.CPU.Decompress[codec]
	if !ok || v <= 0 {
		return 0, fmt.Errorf("no decompression rate for codec %q: add it to the host's cpu.decompress", codec)
	}
	return v, nil
}

// compressRate returns the on-the-fly compression rate for codec.
func (r Resources) compressRate(codec string) (float64, error) {
	v, ok := r.CPU.Compress[codec]
	if !ok || v <= 0 {
		return 0, fmt.Errorf("no compression rate for codec %q: the source's probe must measure it", codec)
	}
	return v, nil
}

// validate checks that the model is known.
func (r Resources) validate() error {
	switch r.Model {
	case ModelBasic, ModelPaper, ModelDolly:
		return nil
	case "":
		return fmt.Errorf("no node model: set \"model\" to basic, paper or dolly (or give a probe)")
	default:
		return fmt.Errorf("unknown node model %q: want basic, paper or dolly", r.Model)
	}
}

// share returns the CPU share (or any cost) of one byte per second at rate,
// and nothing when the rate is not modelled.
func share(rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return 1 / rate
}
