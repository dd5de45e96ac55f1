package capacity

import (
	"fmt"
	"math"
	"strings"
)

// ConstraintKind names the resource an inequality limits.
type ConstraintKind string

const (
	LinkLimit       ConstraintKind = "link"       // one direction of a physical link
	BackplaneLimit  ConstraintKind = "backplane"  // a passive switch's switching capacity
	SwitchingLimit  ConstraintKind = "switching"  // an active node's switching capacity (basic model)
	DiskLimit       ConstraintKind = "disk"       // the disk a host writes (or the source reads)
	IOBusLimit      ConstraintKind = "io-bus"     // a host's I/O bus
	MemoryLimit     ConstraintKind = "memory"     // a host's memory system
	CPULimit        ConstraintKind = "cpu"        // the sum of a host's CPU shares
	DecompressLimit ConstraintKind = "decompress" // decompression on one core
	CompressLimit   ConstraintKind = "compress"   // the source's compression on its compressing threads

	// The CPU and memory system of a machine that several hosts share:
	// Streams counts the hosts (those beside the plan too, Machine.Beside),
	// Coef sums their demands.
	MachineCPULimit    ConstraintKind = "machine-cpu"
	MachineMemoryLimit ConstraintKind = "machine-memory"
	// The one disk the hosts of a machine write to (Machine.SharedDisk).
	MachineDiskLimit ConstraintKind = "machine-disk"
	// The rate the source is told to keep to (Options.MaxStreamRate).
	SourceRateLimit ConstraintKind = "source-rate"
)

// Flow is what a vertex of the logical tree does, as its node model counts
// it. Constraints on a host carry the flow they were derived from so that
// a bottleneck can be explained.
type Flow struct {
	Source     bool // the vertex is the source of the cast
	In         int  // streams received (the paper's model counts the source's image read as one)
	Out        int  // streams sent to children
	Disk       bool // writes the image to disk (the source: reads it)
	Decompress bool // decompresses the stream for its own write
}

// String lists the flow as in "in 1, out 2, disk, decompress".
func (f Flow) String() string {
	var parts []string
	if f.In > 0 {
		parts = append(parts, fmt.Sprintf("in %d", f.In))
	}
	if f.Out > 0 {
		parts = append(parts, fmt.Sprintf("out %d", f.Out))
	}
	if f.Disk {
		if f.Source && f.In == 0 {
			parts = append(parts, "image read")
		} else {
			parts = append(parts, "disk")
		}
	}
	if f.Decompress {
		parts = append(parts, "decompress")
	}
	s := strings.Join(parts, ", ")
	if f.Source {
		s = "source: " + s
	}
	return s
}

// Constraint is one inequality Coef·b ≤ Cap on the rate b of the cast in
// raw image bytes per second. Coef already holds the compression factor:
// a compressed stream on a link costs b/c.
type Constraint struct {
	Kind    ConstraintKind
	Subject string  // the host, switch or directed link ("pc01→sw1") it belongs to
	Flow    Flow    // host constraints: the streams the host handles
	Streams int     // link and backplane constraints: logical channels through it
	Coef    float64 // multiple of b; CPU shares are in cores per (byte/s)
	Cap     float64 // bytes per second, or cores for CPU and decompression
	// Down is, of a CPU's Coef, the work a node does behind its buffer
	// on its own copy (decoding it, writing it), which may fall behind
	// the stream's way in while the cores have work to spare (see
	// aheadRate).
	Down float64
}

// Bound returns the largest rate b the constraint allows.
func (c Constraint) Bound() float64 {
	if c.Coef <= 0 {
		return math.Inf(1)
	}
	return c.Cap / c.Coef
}

// Describe names the constraint in words, e.g.
// "CPU of pc03 (in 1, out 2, disk, decompress)".
func (c Constraint) Describe() string {
	return describeGroup(c, []string{c.Subject})
}

// String shows the constraint with its inequality and the bound it sets.
func (c Constraint) String() string {
	if c.Kind == CPULimit || c.Kind == DecompressLimit || c.Kind == MachineCPULimit {
		// Shown per MB/s so the numbers read like the paper's (2/60 + …)·b ≤ 1.
		return fmt.Sprintf("%s: %.4g·b ≤ %.4g cores (b in MB/s) → b ≤ %.2f MB/s",
			c.Describe(), c.Coef*MB, c.Cap, c.Bound()/MB)
	}
	return fmt.Sprintf("%s: %.4g·b ≤ %.4g MB/s → b ≤ %.2f MB/s",
		c.Describe(), c.Coef, c.Cap/MB, c.Bound()/MB)
}

// Solve returns the largest rate every constraint allows and the
// constraints that bind at that rate. With no constraint the rate is +Inf.
func Solve(constraints []Constraint) (rate float64, binding []Constraint) {
	rate = math.Inf(1)
	for _, c := range constraints {
		rate = min(rate, c.Bound())
	}
	if math.IsInf(rate, 1) {
		return rate, nil
	}
	// Equal limits computed along different paths differ in the last bits.
	tolerance := rate * 1e-9
	for _, c := range constraints {
		if c.Bound() <= rate+tolerance {
			binding = append(binding, c)
		}
	}
	return rate, binding
}
