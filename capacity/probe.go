package capacity

import (
	"fmt"
	"maps"
)

// Probe is what `dolly probe` measures on a machine and sends when the
// node joins. Rates are in bytes per second; a zero field was not measured
// and adds no limit.
type Probe struct {
	Hostname string `json:"hostname"`
	// NICBytesPerSec is the link speed the NIC negotiated.
	NICBytesPerSec float64 `json:"nic_bytes_per_sec"`
	// DiskWriteBytesPerSec is the target's sequential write rate.
	DiskWriteBytesPerSec float64 `json:"disk_write_bytes_per_sec"`
	// DiskWriteCPUBytesPerSec is the rate one core can push data through
	// the write path to the target (write(2) into the page cache, then
	// writeback): its CPU cost.
	DiskWriteCPUBytesPerSec float64 `json:"disk_write_cpu_bytes_per_sec,omitempty"`
	// ZeroesByWriting says the target zeroes a range by writing zeros: a
	// block device that cannot zero in place (a hard disk, many virtual
	// disks), where BLKZEROOUT falls back to writing zero pages. A zero
	// run the node must zero then costs its disk as much as data.
	ZeroesByWriting bool `json:"zeroes_by_writing,omitempty"`
	// DirectWrites says the node writes its target with O_DIRECT, past the
	// page cache, from aligned buffers: what it decodes whole into those
	// is not copied again (see stream.decodedWhole).
	DirectWrites bool `json:"direct_writes,omitempty"`
	// SyncSeconds is how long the target took to put the last of what the
	// write probe wrote on the disk (its final fsync): a cast ends with as
	// much, and the model counts it in the start-up.
	SyncSeconds float64 `json:"sync_seconds,omitempty"`
	// DiskReadBytesPerSec is the sequential read rate of the image store;
	// only the source's matters.
	DiskReadBytesPerSec float64 `json:"disk_read_bytes_per_sec,omitempty"`
	// MemcpyBytesPerSec is the rate of a large memory-to-memory copy on
	// one core.
	MemcpyBytesPerSec float64 `json:"memcpy_bytes_per_sec"`
	// DecompressBytesPerSec maps a codec ("zstd", "gzip") to its output
	// rate on one core.
	DecompressBytesPerSec map[string]float64 `json:"decompress_bytes_per_sec"`
	// RLEDecodeBytesPerSec is the rate one core fills zstd's RLE blocks at
	// (zeros as zstd's own tool writes them), output bytes; zero: not
	// measured. See CPURates.DecompressRLE.
	RLEDecodeBytesPerSec float64 `json:"rle_decode_bytes_per_sec,omitempty"`
	// CompressBytesPerSec maps a codec to the rate one core compresses raw
	// data at when the source compresses an image on the fly.
	CompressBytesPerSec map[string]float64 `json:"compress_bytes_per_sec,omitempty"`
	// DigestBytesPerSec is the CRC32C rate on one core.
	DigestBytesPerSec float64 `json:"digest_bytes_per_sec"`
	Cores             int     `json:"cores"`
	// NetStreamBytesPerSec is the rate one core can push one TCP stream
	// through the kernel. Nodes do not measure it alone; zero means
	// NetStreamCopyRatio times the copy rate.
	NetStreamBytesPerSec float64 `json:"net_stream_bytes_per_sec,omitempty"`
	// RelayBytesPerSec is the rate one core can push a chain node's data
	// path: its stream in and out, forwarded with splice and tee, and its
	// own copy taken into the relay's history and checked with CRC-32C
	// (the target's write is apart). Zero: not measured; the model then
	// adds up the stream, copy and digest rates instead.
	RelayBytesPerSec float64 `json:"relay_bytes_per_sec,omitempty"`
	// FeedBytesPerSec is the rate one core can push the source's data
	// path for one child: its frames written into a pipe, forwarded by
	// the relay with splice and tee, taken into its history and sent, the
	// child's receive left out (see CPURates.Feed). Zero: not measured (a
	// node's probe).
	FeedBytesPerSec float64 `json:"feed_bytes_per_sec,omitempty"`
	// ImageReadCPUBytesPerSec is the rate one core reads the stored image
	// through the page cache at (see CPURates.Read); only the source's
	// matters. Zero: not measured.
	ImageReadCPUBytesPerSec float64 `json:"image_read_cpu_bytes_per_sec,omitempty"`
	// LinkStreamBytesPerSec is the rate one core can receive a stream at
	// while it sends one, both at the pace of the node's link (the ring of
	// bandwidth probes; see CPURates.Link). Zero: not measured.
	LinkStreamBytesPerSec float64 `json:"link_stream_bytes_per_sec,omitempty"`
}

// NetStreamCopyRatio relates the CPU cost of one kernel TCP stream to a
// memory copy when no calibrated figure is known: a stream runs at this
// many times the memcpy rate per core. 1 says a stream costs about one copy
// of its bytes (socket buffer handling with checksums and segmentation
// offloaded to the NIC). The 2000-era figures were 60 MB/s per stream
// against 90 MB/s per copy, a ratio of 2/3; lab measurements calibrate it.
const NetStreamCopyRatio = 1.0

// Resources turns the probe into the dolly model's resources for a host in
// the given role. The memory system is taken as twice the copy rate, since
// a copy reads and writes every byte; a single-core copy understates a
// modern memory system, so this errs on the safe side.
func (p Probe) Resources(role Role) Resources {
	disk := p.DiskWriteBytesPerSec
	if role == RoleSource {
		disk = p.DiskReadBytesPerSec
	}
	net := p.NetStreamBytesPerSec
	if net <= 0 {
		net = NetStreamCopyRatio * p.MemcpyBytesPerSec
	}
	return Resources{
		Model:              ModelDolly,
		Disk:               disk,
		ZeroesByWriting:    p.ZeroesByWriting && role != RoleSource,
		DirectWrites:       p.DirectWrites && role != RoleSource,
		Memory:             2 * p.MemcpyBytesPerSec,
		Cores:              float64(max(p.Cores, 1)),
		ParallelDecompress: false,
		CPU: CPURates{
			Net:           net,
			Relay:         p.RelayBytesPerSec,
			Link:          p.LinkStreamBytesPerSec,
			Feed:          p.FeedBytesPerSec,
			Read:          p.ImageReadCPUBytesPerSec,
			Disk:          p.DiskWriteCPUBytesPerSec,
			Copy:          p.MemcpyBytesPerSec,
			Digest:        p.DigestBytesPerSec,
			Decompress:    maps.Clone(p.DecompressBytesPerSec),
			DecompressRLE: p.RLEDecodeBytesPerSec,
			Compress:      maps.Clone(p.CompressBytesPerSec),
		},
	}
}

// SingleSwitchName is the name of the switch SingleSwitch builds.
const SingleSwitchName = "switch"

// SingleSwitch is the default network when no topology file is given:
// the source and every node on one switch of unknown backplane, each at
// its probed NIC speed. Hosts without a hostname are named node1, node2, ….
func SingleSwitch(source Probe, nodes []Probe) Network {
	net := Network{Switches: []Switch{{Name: SingleSwitchName}}}
	add := func(p Probe, role Role, fallback string) {
		name := p.Hostname
		if name == "" {
			name = fallback
		}
		net.Hosts = append(net.Hosts, Host{Name: name, Switch: SingleSwitchName,
			Link: p.NICBytesPerSec, Role: role, Resources: p.Resources(role)})
	}
	add(source, RoleSource, "source")
	for i, p := range nodes {
		add(p, RoleNode, fmt.Sprintf("node%d", i+1))
	}
	return net
}

// ApplyProbes fills in the hosts a topology file left open: a host named
// like a probe's hostname that has no node model gets the probe's dolly
// resources, and one without a link capacity gets the probed NIC speed.
// It returns the hostnames of probes that match no host.
func (n *Network) ApplyProbes(probes []Probe) (unknown []string) {
	index := make(map[string]int, len(n.Hosts))
	for i, h := range n.Hosts {
		index[h.Name] = i
	}
	for _, p := range probes {
		i, ok := index[p.Hostname]
		if !ok {
			unknown = append(unknown, p.Hostname)
			continue
		}
		h := &n.Hosts[i]
		role := h.Role
		if role == "" {
			role = RoleNode
		}
		if h.Resources.Model == "" {
			h.Resources = p.Resources(role)
		}
		if h.Link <= 0 {
			h.Link = p.NICBytesPerSec
		}
	}
	return unknown
}
