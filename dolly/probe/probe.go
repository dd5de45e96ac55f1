// Package probe measures a machine for the capacity model: its link, its
// target's write rate, its copy, digest, TCP and codec rates, each bounded
// in bytes and time.
package probe

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"dolly/capacity"
	"dolly/imaging"
	"dolly/internal/units"
)

// Config says what to measure. Every measurement is bounded in bytes
// and time, and none changes a byte of data: the target's write rate is
// measured by writing back what was just read from it.
type Config struct {
	Name   string // host name to report; default: the hostname
	Target string // block device or file whose write rate to measure; "" skips
	Image  string // the source's image, whose read rate to measure; "" skips
	// LocalIP is this machine's address facing the cast, to find its NIC;
	// nil takes the interface of the default route.
	LocalIP net.IP
	// Budget bounds each measurement of the CPU; default 250 ms.
	Budget time.Duration
	// DiskBudget bounds each disk measurement; default four times Budget.
	// A disk's rate past its write cache takes longer to see than a CPU
	// figure does.
	DiskBudget time.Duration
	// Compress also measures compression rates (the source compresses raw
	// images on the fly when the plan says so).
	Compress bool
	// SkipDecoders are codecs ("zstd", "gzip") whose decoding need not be
	// timed: no plan uses them.
	SkipDecoders []string
	// Buffered measures writes to a block device through the page cache,
	// as a node run with Buffered writes them; otherwise with O_DIRECT.
	Buffered bool
	// Source measures the source's data path (see feedCost) where a
	// node's is a relay's (see relayCost), and what reading Image through
	// the page cache costs (see readCost).
	Source bool
	// RelayHistory is the history the relay probe uses (relay.NewHistory;
	// nil: one of its own). The node's cast reuses it: the probe has
	// already paid for mapping its pages.
	RelayHistory []byte
}

// Report is a probe with what people need to read it.
type Report struct {
	capacity.Probe
	NIC   string   `json:"nic,omitempty"`   // the interface measured
	Notes []string `json:"notes,omitempty"` // what could not be measured, and why
}

// CastBudget and CastDiskBudget bound each measurement of the probes a
// cast waits for: the node's at join and the source's before it admits
// nodes. Each CPU figure settles within 150 ms about as well as within the
// 250 that dolly probe takes by default (over six runs on one machine, the
// relay's path spread 1.17-1.43 GB/s of a core against 1.12-1.35), and a
// node's probe takes 0.7 s rather than 1.15. The disk's half second bounds
// the reads as well as the writes: a target that reads slowly (a loop
// device whose file the host has not cached) once took the whole second of
// the old budget for 17 MB, and its node's probe 1.6 s, over a join goal
// of 3 s for 24 nodes. The rate is timed to the end of the final sync, so
// a smaller sample is still one past the write cache; a fast disk ends at
// maxProbeRegion first.
const (
	CastBudget     = 150 * time.Millisecond
	CastDiskBudget = 500 * time.Millisecond
)

// probeBlock is the unit of the disk probes: large enough for sequential
// rates, aligned for O_DIRECT.
const probeBlock = 4 << 20

// diskProbe is what a disk measurement found.
type diskProbe struct {
	rate    float64       // bytes per second through the write path to the disk
	direct  bool          // written with O_DIRECT
	cpuRate float64       // bytes per second one core can push through that path
	sync    time.Duration // the final fsync's time
	how     string
}

// Run measures this machine for the capacity model.
func Run(ctx context.Context, cfg Config) Report {
	if cfg.Budget <= 0 {
		cfg.Budget = 250 * time.Millisecond
	}
	if cfg.DiskBudget <= 0 {
		cfg.DiskBudget = 4 * cfg.Budget
	}
	var r Report
	r.Hostname = cfg.Name
	if r.Hostname == "" {
		r.Hostname, _ = os.Hostname()
	}
	r.Cores = runtime.NumCPU()
	note := func(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

	if nic, speed, err := nicSpeed(cfg.LocalIP); err != nil {
		note("link speed: %v", err)
		r.NIC = nic
	} else {
		r.NIC, r.NICBytesPerSec = nic, speed
	}
	// The disks are measured on a thread of their own while this one
	// times the decoders, which count their own thread's CPU time: the
	// probe, which the join waits for, takes the longer of the two rather
	// than both. The memory, CRC and stream figures, which another thread's
	// copying would slow (or, the streams', add to the process's CPU
	// time), are timed once the disks are done.
	disks := make(chan []string, 1)
	var diskReport Report
	go func() { disks <- probeDisks(ctx, cfg, &diskReport) }()
	var decoderNotes []string
	r.DecompressBytesPerSec = map[string]float64{}
	for _, enc := range []imaging.Encoding{imaging.Zstd, imaging.Gzip} {
		if slices.Contains(cfg.SkipDecoders, enc.String()) {
			continue
		}
		runtime.GC()
		if enc == imaging.Zstd {
			rate, rle, err := probeZstdDecode(cfg.Budget * 5 / 4)
			if err != nil {
				decoderNotes = append(decoderNotes, fmt.Sprintf("%s decompression: %v", enc, err))
				continue
			}
			r.DecompressBytesPerSec[enc.String()], r.RLEDecodeBytesPerSec = rate, rle
			continue
		}
		rate, err := probeDecompress(enc, cfg.Budget)
		if err != nil {
			decoderNotes = append(decoderNotes, fmt.Sprintf("%s decompression: %v", enc, err))
			continue
		}
		r.DecompressBytesPerSec[enc.String()] = rate
	}
	r.Notes = append(r.Notes, <-disks...)
	r.DiskWriteBytesPerSec, r.DiskWriteCPUBytesPerSec = diskReport.DiskWriteBytesPerSec, diskReport.DiskWriteCPUBytesPerSec
	r.ZeroesByWriting, r.DiskReadBytesPerSec, r.SyncSeconds = diskReport.ZeroesByWriting, diskReport.DiskReadBytesPerSec, diskReport.SyncSeconds
	r.ImageReadCPUBytesPerSec, r.DirectWrites = diskReport.ImageReadCPUBytesPerSec, diskReport.DirectWrites

	// One pair of buffers serves every memory measurement, so probing
	// stays small next to a node's working set.
	// Garbage from one step is collected before the next, so the peak is
	// that of the largest step, not of them all.
	runtime.GC()
	src, dst := make([]byte, 4<<20), make([]byte, 4<<20)
	StandardSample(src, 1)
	// A copy and a checksum of 4 MiB take a millisecond or less: a fifth
	// of the budget repeats them dozens of times, and the node joins
	// sooner.
	r.MemcpyBytesPerSec = measure(cfg.Budget/5, func() int { return copy(dst, src) })
	r.DigestBytesPerSec = measure(cfg.Budget/5, func() int { imaging.CRC32C(src); return len(src) })
	if cfg.Source {
		r.NetStreamBytesPerSec, r.FeedBytesPerSec = probeFeed(ctx, src, cfg.RelayHistory, r.MemcpyBytesPerSec, cfg.Budget, note)
	} else {
		r.NetStreamBytesPerSec, r.RelayBytesPerSec = probeStreams(ctx, src, cfg.RelayHistory, r.MemcpyBytesPerSec, cfg.Budget, true, note)
	}
	dst = nil
	r.Notes = append(r.Notes, decoderNotes...)
	sample := src[:2<<20]
	if cfg.Compress {
		runtime.GC()
		rate, err := probeCompress(sample, cfg.Budget)
		if err != nil {
			note("zstd compression: %v", err)
		} else {
			r.CompressBytesPerSec = map[string]float64{imaging.Zstd.String(): rate}
		}
	}
	// Hand the buffers back before the cast needs the memory.
	src, sample = nil, nil
	debug.FreeOSMemory()
	return r
}

// probeDisks measures the target's write rate and the image's read rate,
// as cfg says, into r's disk figures, and returns the notes for them.
func probeDisks(ctx context.Context, cfg Config, r *Report) []string {
	var notes []string
	note := func(format string, a ...any) { notes = append(notes, fmt.Sprintf(format, a...)) }
	if cfg.Target != "" {
		d, err := probeTargetWrite(ctx, cfg.Target, cfg.DiskBudget, cfg.Buffered)
		if err != nil {
			note("target write rate: %v", err)
		} else {
			r.DiskWriteBytesPerSec, r.DiskWriteCPUBytesPerSec, r.SyncSeconds = d.rate, d.cpuRate, d.sync.Seconds()
			r.DirectWrites = d.direct
			note("target write rate: %s/s (%s/s of CPU): %s", units.FormatBytes(int64(d.rate)), units.FormatBytes(int64(d.cpuRate)), d.how)
		}
		if r.ZeroesByWriting = zeroesByWriting("/sys", cfg.Target); r.ZeroesByWriting {
			note("the target zeroes a range by writing zeros (its disk takes no write-zeroes command): a run of zeros the node must zero costs it a write")
		}
	}
	if cfg.Image != "" {
		rate, err := probeRead(ctx, cfg.Image, cfg.DiskBudget)
		if err != nil {
			note("image read rate: %v", err)
		} else {
			r.DiskReadBytesPerSec = rate
		}
	}
	if cfg.Image != "" && cfg.Source {
		// A fifth of the CPU budget: a megabyte's read takes a fraction
		// of a millisecond, and the source's probe runs while nodes join.
		cost, err := readCost(ctx, cfg.Image, cfg.Budget/5)
		if err != nil {
			note("image read cost: %v", err)
		} else {
			r.ImageReadCPUBytesPerSec = 1 / cost
		}
	}
	return notes
}

// probeStreams measures what a TCP stream and (withRelay) a relay node's data path
// cost the CPU, as the rates one core reaches (see streamCost, relayCost).
// A stream's rate counts one half of it (a send or a receive): its cost
// less the sender's copy, over two. A relay that timed no dearer than a
// stream was measured in a moment the machine ran slow (in a demo, while
// 23 more nodes started, a stream ran at a tenth of its rate): both are
// measured once more.
func probeStreams(ctx context.Context, buf, history []byte, copyRate float64, budget time.Duration, withRelay bool, note func(string, ...any)) (stream, relay float64) {
	for try := 1; ; try++ {
		streamed, err := streamCost(buf, budget)
		if err != nil {
			note("TCP stream cost: %v", err)
			return 0, 0
		}
		stream = 0
		if half := (streamed - 1/copyRate) / 2; copyRate > 0 && half > 0 {
			stream = 1 / half
		}
		if !withRelay {
			return stream, 0
		}
		relayed, err := relayCost(ctx, buf, history, budget)
		if err != nil {
			note("relay cost: %v", err)
			return stream, 0
		}
		if node := relayed - streamed; node > 0 {
			return stream, 1 / node
		}
		if try == 2 {
			note("relay cost: no more than a stream's, measured twice with noise")
			return stream, 0
		}
	}
}

// StartCrowd sets this node's data path up for a crowd's push and warms it.
// It takes its memory from mem where mem holds CrowdMemory bytes, else
// memory of its own. A node lends it memory it has mapped already and
// will not use before the cast (its relay's history): the first touches
// of fresh memory cost a virtual machine's host dearly, and 24 nodes'
// disk crowds (StartDiskCrowd) took most of a second of the join in
// faults on a VM just booted.
func StartCrowd(ctx context.Context, mem []byte) (*Crowd, error) {
	var buf, history []byte
	if len(mem) >= CrowdMemory {
		buf, history = mem[:1<<20:1<<20], mem[1<<20:CrowdMemory:CrowdMemory]
	} else {
		buf, history = make([]byte, 1<<20), make([]byte, crowdHistory)
	}
	StandardSample(buf, 1)
	return startCrowd(ctx, buf, history)
}

// CrowdMemory is the memory StartCrowd can use: its sample and its
// relay's history. A crowd's relay keeps a small history, since a cast
// pays the first touches of its 32 MiB once, not on every byte, and 24
// nodes on a small machine need not take 768 MiB at once; a few MiB are
// past the caches all the same with the others'.
const CrowdMemory = 1<<20 + crowdHistory

const crowdHistory = 2 << 20

// PathCost is the CPU time per byte, in seconds, of the whole loopback
// pipeline relayCost times (sender, relay, child and reader), from the
// figures probeStreams derives from it; 0 if one is missing.
func PathCost(p capacity.Probe) float64 {
	if p.RelayBytesPerSec <= 0 || p.NetStreamBytesPerSec <= 0 || p.MemcpyBytesPerSec <= 0 {
		return 0
	}
	return 1/p.RelayBytesPerSec + 2/p.NetStreamBytesPerSec + 1/p.MemcpyBytesPerSec
}

// measure runs work repeatedly for about budget and returns bytes/s.
// The rate is over the CPU time of the thread that runs work, not the
// clock: a rate per core that other programs on the machine (other nodes
// probing at the same time, writeback) do not skew, nor the rest of this
// process (dolly-server probes itself while nodes join).
func measure(budget time.Duration, work func() int) float64 {
	var rate float64
	OnOneThread(func(cpu func() time.Duration) {
		var n int64
		start, cpu0 := time.Now(), cpu()
		for time.Since(start) < budget || n == 0 {
			n += int64(work())
		}
		if spent := cpu() - cpu0; spent > 0 {
			rate = float64(n) / spent.Seconds()
		} else {
			rate = float64(n) / time.Since(start).Seconds()
		}
	})
	return rate
}

// Format renders the report for people.
func (r Report) Format() string {
	var b strings.Builder
	rate := func(v float64) string {
		if v <= 0 {
			return "not measured"
		}
		return units.FormatBytes(int64(v)) + "/s"
	}
	zeroing := func(byWriting bool) string {
		switch {
		case byWriting:
			return "by writing zeros"
		case r.DiskWriteBytesPerSec <= 0:
			return "not measured"
		}
		return "in place"
	}
	written := func(r Report) string {
		switch {
		case r.DiskWriteBytesPerSec <= 0:
			return "not measured"
		case r.DirectWrites:
			return "with O_DIRECT, past the page cache"
		}
		return "through the page cache"
	}
	fmt.Fprintf(&b, "probe of %s (%d cores)\n", r.Hostname, r.Cores)
	nic := "link speed"
	if r.NIC != "" {
		nic += " (" + r.NIC + ")"
	}
	linkRate := rate(r.NICBytesPerSec)
	if r.NICBytesPerSec > 0 {
		linkRate = fmt.Sprintf("%s (%.0f Mbit/s)", linkRate, r.NICBytesPerSec*8/1e6)
	}
	rows := [][2]string{
		{nic, linkRate},
		{"target write", rate(r.DiskWriteBytesPerSec)},
		{"target zeroes", zeroing(r.ZeroesByWriting)},
		{"target written", written(r)},
		{"write path, one core", rate(r.DiskWriteCPUBytesPerSec)},
		{"TCP stream, one core", rate(r.NetStreamBytesPerSec)},
		{"relay path, one core", rate(r.RelayBytesPerSec)},
	}
	if r.FeedBytesPerSec > 0 {
		rows = append(rows, [2]string{"source path, one core", rate(r.FeedBytesPerSec)})
	}
	if r.DiskReadBytesPerSec > 0 {
		rows = append(rows, [2]string{"image read", rate(r.DiskReadBytesPerSec)})
	}
	if r.ImageReadCPUBytesPerSec > 0 {
		rows = append(rows, [2]string{"image read, one core", rate(r.ImageReadCPUBytesPerSec)})
	}
	rows = append(rows,
		[2]string{"memory copy, one core", rate(r.MemcpyBytesPerSec)},
		[2]string{"CRC-32C, one core", rate(r.DigestBytesPerSec)})
	for _, codec := range []string{"zstd", "gzip"} {
		rows = append(rows, [2]string{codec + " decode", rate(r.DecompressBytesPerSec[codec])})
		if codec == imaging.Zstd.String() && r.RLEDecodeBytesPerSec > 0 {
			rows = append(rows, [2]string{codec + " RLE blocks decode", rate(r.RLEDecodeBytesPerSec)})
		}
	}
	if v := r.CompressBytesPerSec["zstd"]; v > 0 {
		rows = append(rows, [2]string{"zstd encode, one core", rate(v)})
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "  %-24s %s\n", row[0], row[1])
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}
