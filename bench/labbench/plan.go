package main

import (
	"fmt"
	"slices"
	"time"

	"dolly/internal/sampleimage"
)

// runSpec is one measurement.
type runSpec struct {
	method      string // dolly, udpcast, nc-chain
	topology    string // chain, tree, star; multicast for udpcast
	fanout      int
	compression string // none or zstd
	nodes       int
	mbit        float64
	image       string // which image
	headline    bool   // part of the headline comparison
	// slowMbit, when set, gives the run's lab one more node, on a link
	// this slow (a bad cable); slow says the run casts to it too, beside
	// its nodes at mbit.
	slowMbit float64
	slow     bool
	// late, in a lab of one more node than nodes, starts that node
	// lateAfter after the cast has started; lateBase is the same run
	// without it, its baseline.
	late, lateBase bool
	// trunkMbit, when set, splits the lab's nodes over two switches, the
	// source's and a far one, joined by a trunk this fast, and the runs
	// pass the lab's topology file.
	trunkMbit float64
	// allBlocks casts every block of the image as stored (-zero-free),
	// the free ones of its file system too.
	allBlocks bool
}

// linkName says how fast a lab's links are.
func linkName(mbit float64) string {
	if mbit == 0 {
		return "unshaped links"
	}
	return fmt.Sprintf("%5v Mbit/s", mbit)
}

// lateAfter is how long after the cast started a late node starts.
const lateAfter = 10 * time.Second

func (r runSpec) String() string {
	shape := r.topology
	if r.topology == "tree" {
		shape = fmt.Sprintf("%d-tree", r.fanout)
	}
	s := fmt.Sprintf("%-8s %-9s %-4s %2d nodes %s (%s image)", r.method, shape, r.compression, r.nodes, linkName(r.mbit), r.image)
	switch {
	case r.slow:
		s += fmt.Sprintf(" + 1 node at %v Mbit/s", r.slowMbit)
	case r.slowMbit > 0:
		s += " without its slow node"
	case r.late:
		s += fmt.Sprintf(" + 1 node started %v into the cast", lateAfter)
	case r.lateBase:
		s += " without its late node"
	case r.trunkMbit > 0:
		s += fmt.Sprintf(", two switches joined at %v Mbit/s", r.trunkMbit)
	}
	if r.allBlocks {
		s += " -zero-free"
	}
	return s
}

// The images: matrix runs use a small one so that slow topologies stay
// within the time budget; the stars of 12 and 24 over Fast Ethernet, which
// share the server's link 12 and 24 ways, a tiny one, a quarter of the
// small one; the headline comparison uses 1 GiB.
// The dirty images are the large one as a used disk is: ext4 whose 600
// MiB of free space hold the data of a file deleted since, and NTFS and
// FAT32 quick-formatted over a disk full of old data.
var imageSpecs = map[string]sampleimage.Spec{
	"tiny":        {Size: 64 << 20, Files: 24 << 20},
	"small":       {Size: 256 << 20, Files: 96 << 20},
	"large":       {Size: 1 << 30, Files: 360 << 20},
	"dirty":       {Size: 1 << 30, Files: 360 << 20, Junk: 600 << 20},
	"dirty-ntfs":  {Size: 1 << 30, Files: 360 << 20, Junk: 1 << 30, FS: "ntfs"},
	"dirty-fat32": {Size: 1 << 30, Files: 360 << 20, Junk: 1 << 30, FS: "fat32"},
}

type benchPlan []runSpec

// group is the runs that share one lab: one link speed, up to maxNodes,
// and a slow node if slowMbit is set.
type group struct {
	mbit      float64
	slowMbit  float64
	trunkMbit float64
	// own is set for runs with a lab of their own: the used disk's image,
	// whose disks the matrix's 24 nodes need not all hold.
	own      string
	maxNodes int
	runs     []runSpec
}

func (p benchPlan) groups() []group {
	var gs []group
	for _, r := range p {
		own := ""
		if dirtyImage(r.image) {
			own = r.image
		}
		i := slices.IndexFunc(gs, func(g group) bool {
			return g.mbit == r.mbit && g.slowMbit == r.slowMbit && g.trunkMbit == r.trunkMbit && g.own == own
		})
		if i < 0 {
			gs = append(gs, group{mbit: r.mbit, slowMbit: r.slowMbit, trunkMbit: r.trunkMbit, own: own})
			i = len(gs) - 1
		}
		gs[i].runs = append(gs[i].runs, r)
		n := r.nodes
		if r.late {
			n++ // the late node is one of the lab's
		}
		gs[i].maxNodes = max(gs[i].maxNodes, n)
	}
	return gs
}

// images are the names of the images the group's runs cast, sorted.
func (g group) images() []string {
	var names []string
	for _, r := range g.runs {
		if !slices.Contains(names, r.image) {
			names = append(names, r.image)
		}
	}
	slices.Sort(names)
	return names
}

func (p benchPlan) images() map[string]sampleimage.Spec {
	out := map[string]sampleimage.Spec{}
	for _, r := range p {
		out[r.image] = imageSpecs[r.image]
	}
	return out
}

// dollyShapes are the topologies of the matrix.
var dollyShapes = []struct {
	topology string
	fanout   int
}{{"chain", 1}, {"tree", 2}, {"tree", 3}, {"star", 0}}

// matrix is every dolly topology and both forms, plus the peers, at each
// node count. With one node every shape is the same chain.
func matrix(mbit float64, counts []int) benchPlan {
	var p benchPlan
	for _, n := range counts {
		for _, comp := range []string{"none", "zstd"} {
			for _, s := range dollyShapes {
				if n == 1 && s.topology != "chain" {
					continue
				}
				fanout := s.fanout
				if s.topology == "star" {
					fanout = n
				}
				p = append(p, runSpec{method: "dolly", topology: s.topology, fanout: fanout, compression: comp, nodes: n, mbit: mbit, image: "small"})
			}
		}
		if n > 1 {
			// What a user gets who names no plan: the raw image, and the
			// model picks the plan and whether to compress.
			p = append(p, runSpec{method: "dolly", topology: "auto", compression: "auto", nodes: n, mbit: mbit, image: "small"})
		}
		p = append(p,
			runSpec{method: "udpcast", topology: "multicast", compression: "none", nodes: n, mbit: mbit, image: "small"},
			runSpec{method: "nc-chain", topology: "chain", fanout: 1, compression: "none", nodes: n, mbit: mbit, image: "small"})
	}
	return p
}

// fullPlan is `make bench`: Fast Ethernet up to 24 nodes, Gigabit up to 8,
// and the headline comparison of 24 nodes on a 1 GiB image.
func fullPlan() benchPlan {
	p := matrix(100, []int{1, 4, 12, 24})
	for i, r := range p {
		// Where the per-node rate falls with the node count (dolly's
		// star, the peers) the small image would take minutes; the tiny
		// one takes a quarter of that, still long enough to hide the
		// start-up.
		if r.nodes >= 12 && (r.method != "dolly" || r.topology == "star") {
			p[i].image = "tiny"
		}
	}
	// A late node: 11 nodes, and a twelfth that starts 10 s into the cast,
	// against the 11 alone. The raw chain of the large image runs long
	// enough (half a minute) for it to come mid-cast.
	for _, late := range []bool{false, true} {
		p = append(p, runSpec{method: "dolly", topology: "chain", fanout: 1, compression: "none", nodes: 11, mbit: 100, image: "large", late: late, lateBase: !late})
	}
	// One node on the same image: what the chain of 24 is measured against;
	// and the zstd chain of 8, what its chain of 24 is.
	p = append(p, runSpec{method: "dolly", topology: "chain", fanout: 1, compression: "none", nodes: 1, mbit: 100, image: "large", headline: true},
		runSpec{method: "dolly", topology: "chain", fanout: 1, compression: "zstd", nodes: 8, mbit: 100, image: "large", headline: true})
	for _, r := range []runSpec{
		{method: "dolly", topology: "chain", fanout: 1, compression: "none"},
		{method: "dolly", topology: "chain", fanout: 1, compression: "zstd"},
		{method: "udpcast", topology: "multicast", compression: "none"},
		{method: "nc-chain", topology: "chain", fanout: 1, compression: "none"},
	} {
		r.nodes, r.mbit, r.image, r.headline = 24, 100, "large", true
		if r.method == "nc-chain" {
			// Its 24 buffered writers of the large image ran for more than
			// the 15 minutes a cast may take, and the gigabytes they left
			// dirty slowed every row after them: it casts the small one.
			r.image = "small"
		}
		p = append(p, r)
	}
	// At Gigabit speed the small image would take a second or two, too
	// little to tell a rate from the start-up: the large image it is.
	// The peers run far slower from 4 nodes on: they cast the small
	// image, a quarter of the time.
	giga := matrix(1000, []int{1, 4, 8})
	for i, r := range giga {
		giga[i].image = "large"
		if r.method != "dolly" && r.nodes >= 4 {
			giga[i].image = "small"
		}
	}
	return append(append(append(append(append(p, dirtyPlan()...), giga...), slowNodePlan()...), twoSwitchPlan()...), unshapedPlan()...)
}

// dirtyImages are the used disks' images, one per file system.
var dirtyImages = []string{"dirty", "dirty-ntfs", "dirty-fat32"}

func dirtyImage(name string) bool { return slices.Contains(dirtyImages, name) }

// dirtyPlan casts each dirty image to 4 nodes at 100 Mbit/s as a user does
// (-auto), and with -zero-free, which sends its free space too.
func dirtyPlan() benchPlan {
	var p benchPlan
	for _, img := range dirtyImages {
		for _, all := range []bool{false, true} {
			p = append(p, runSpec{method: "dolly", topology: "auto", compression: "auto", nodes: 4, mbit: 100, image: img, allBlocks: all})
		}
	}
	return p
}

// unshapedPlan is a chain of 4 on veth links left unshaped: as fast as
// this machine's CPU and disk let a chain run, raw and zstd.
func unshapedPlan() benchPlan {
	var p benchPlan
	for _, comp := range []string{"none", "zstd"} {
		p = append(p, runSpec{method: "dolly", topology: "chain", fanout: 1, compression: comp, nodes: 4, mbit: 0, image: "large"})
	}
	return p
}

// twoSwitchPlan is 16 nodes at 1 Gbit/s, 8 on the source's switch and 8
// on another joined to it by a 100 Mbit/s trunk, described by the lab's
// topology file; the gigabit matrix's 8 nodes are the single switch they
// are held against.
func twoSwitchPlan() benchPlan {
	return benchPlan{
		{method: "dolly", topology: "auto", compression: "auto", nodes: 16, mbit: 1000, image: "large", trunkMbit: 100},
		{method: "dolly", topology: "chain", fanout: 1, compression: "none", nodes: 16, mbit: 1000, image: "large", trunkMbit: 100},
	}
}

// slowNodePlan is 8 nodes at 100 Mbit/s without and with a ninth at 10
// Mbit/s, as a user runs them (-auto) and with a plain -chain. The slow
// node takes the small image in half a minute (zstd) to a minute and a
// half (raw).
func slowNodePlan() benchPlan {
	var p benchPlan
	for _, r := range []runSpec{
		{topology: "auto", compression: "auto"},
		{topology: "chain", fanout: 1, compression: "none"},
	} {
		r.method, r.nodes, r.mbit, r.image, r.slowMbit = "dolly", 8, 100, "small", 10
		with := r
		with.slow = true
		p = append(p, r, with)
	}
	return p
}

// quickPlan is `make bench-quick`, the subset CI can afford.
func quickPlan() benchPlan {
	d := func(topology string, fanout int, comp string, n int) runSpec {
		return runSpec{method: "dolly", topology: topology, fanout: fanout, compression: comp, nodes: n, mbit: 100, image: "small"}
	}
	return benchPlan{
		d("chain", 1, "none", 1),
		d("chain", 1, "none", 8),
		d("auto", 0, "auto", 8),
		d("tree", 2, "none", 4),
		d("star", 4, "none", 4),
		d("chain", 1, "none", 4),
		d("chain", 1, "zstd", 4),
		d("auto", 0, "auto", 4),
		{method: "udpcast", topology: "multicast", compression: "none", nodes: 8, mbit: 100, image: "small"},
	}
}
