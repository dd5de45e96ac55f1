package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

const (
	// DefaultFrameBytes is the raw payload of one frame: small enough that
	// forwarding starts at once, large enough to keep per-frame costs low.
	DefaultFrameBytes = 1 << 20
	// RelayWake is how long a dolly relay gathers its upstream's stream
	// before it wakes (dolly/relay), and CrowdedRelayWake how long where
	// the cores of a machine its node shares hold the cast back, or nearly
	// (see Result.CrowdedWake): dolly-server then has them wake less
	// often. RelayMinBatch is the least a relay wakes for, however slow
	// its upstream. A hop of a chain delays the end of the stream by about
	// its wake-up and a default one more (see fabric.hopLag).
	RelayWake        = 4 * time.Millisecond
	CrowdedRelayWake = 12 * time.Millisecond
	RelayMinBatch    = 16 << 10
	// DefaultStartup covers connecting the tree, the handshakes and
	// opening the targets before the first byte flows, and the final sync
	// and verdict: a few round trips on a LAN, a target opened and synced.
	DefaultStartup = 100 * time.Millisecond
	// DefaultMaxFanout is the largest n-ary tree the planner tries.
	DefaultMaxFanout = 5
)

// Options are the planning parameters.
type Options struct {
	// Compression is the compressed form of the image, if there is one.
	// Compressed plans are tried only when its factor is above 1.
	Compression Compression
	ImageBytes  int64         // raw image size; 0 ranks plans by rate alone
	FrameBytes  int64         // raw bytes per frame; 0 means DefaultFrameBytes
	Startup     time.Duration // constant start-up time; 0 means DefaultStartup
	MaxFanout   int           // largest n-ary tree fanout; 0 means DefaultMaxFanout
	// ZeroFraction is the share of the raw image in zero runs. dolly sends
	// them as a few header bytes and nodes zero the range instead of
	// writing it, so a mostly empty filesystem casts faster than its size.
	ZeroFraction float64
	// ZeroedFraction is the share of the raw image in zero runs that the
	// nodes zero; the rest (a file system's free blocks, with its block
	// map) they leave or discard. At most ZeroFraction. It costs a node
	// only where its disk zeroes by writing (Resources.ZeroesByWriting).
	ZeroedFraction float64
	// HoleFraction is the share of the raw image that its file keeps as
	// holes (a sparse file): the source sends them as zero runs without
	// reading them. At most ZeroFraction.
	HoleFraction float64
	// UndecodedFraction is the share of the raw image that a node's zstd
	// decoder hands on as zeros without decoding or scanning them, when
	// the image is sent as stored: the zeros deep in a run of RLE blocks
	// (see imaging.ZstdRLEBytes). At most ZeroFraction. An image
	// compressed on the fly sends its zero runs as zero frames, which are
	// not decoded either: there the zero runs count.
	UndecodedFraction float64
	// WholeFraction is the share of the raw image that a node decodes a
	// zstd frame at a time, whole, when the image is sent as stored: its
	// frames of a chunk or less (see imaging.CountZstd), as dolly captures
	// an image. Written with O_DIRECT, those are decoded into the buffers
	// the target writes from, not copied into them. A stream compressed on
	// the fly is made of such frames: there all of it counts.
	WholeFraction float64
	// Pieces describe the image stretch by stretch, in order, when it is
	// not uniform; their shares weight their rates. The figures above stay
	// the image's averages. Nil counts the image as uniform.
	Pieces []Piece
	// AheadBytes is how much of the stream a node holds between its link
	// and its own work (a dolly relay's history): the links may run that
	// far ahead of the decoding and writing, so that pieces overlap (see
	// aheadRate). 0 takes the pieces in turn; so does an unknown
	// ImageBytes.
	AheadBytes int64
	// Stored is how the source holds the image when that differs from a
	// plan's stream: a raw image sent compressed is compressed on the fly,
	// a compressed one sent raw is decompressed. Nil: stored as sent.
	Stored *Compression
	// Explicit plans are evaluated as given next to the generated ones,
	// e.g. a tree written in a topology file.
	Explicit []Plan
	// MaxStreamRate caps the stream the source sends, in bytes per second
	// as sent (dolly-server -max-rate); 0: no cap.
	MaxStreamRate float64
}

func (o Options) withDefaults() Options {
	if o.FrameBytes <= 0 {
		o.FrameBytes = DefaultFrameBytes
	}
	if o.Startup <= 0 {
		o.Startup = DefaultStartup
	}
	if o.MaxFanout <= 0 {
		o.MaxFanout = DefaultMaxFanout
	}
	return o
}

// ETA predicts the time of a cast at rate (raw bytes/s) through a tree of
// the given depth: the image itself, plus the lag of the depth−1 hops below
// the first, hop each (see fabric.hopLag), plus the constant start-up.
// Zero options take defaults.
func ETA(rate float64, depth int, hop time.Duration, opt Options) time.Duration {
	opt = opt.withDefaults()
	if rate <= 0 || math.IsNaN(rate) {
		return time.Duration(math.MaxInt64)
	}
	if math.IsInf(rate, 1) {
		return opt.Startup
	}
	seconds := float64(opt.ImageBytes)/rate + float64(max(depth-1, 0))*hop.Seconds()
	if seconds > float64(math.MaxInt64/2)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(seconds*float64(time.Second)) + opt.Startup
}

// Rank evaluates the candidate plans for the network and returns them best
// first: shortest ETA, or highest rate when the image size is unknown.
// Candidates are a chain, n-ary trees of fanout 2 up to opt.MaxFanout
// (below the number of nodes), a star, each raw and, when the options give
// a compression factor above 1, compressed; plus opt.Explicit.
func Rank(net Network, opt Options) ([]Result, error) {
	opt = opt.withDefaults()
	f, err := compile(net)
	if err != nil {
		return nil, err
	}
	plans, err := f.candidates(opt)
	if err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(plans))
	for _, p := range plans {
		r, err := f.evaluate(p, opt)
		if err != nil {
			return nil, fmt.Errorf("%s plan (%s): %w", p.Name(), p.Compression.Name(), err)
		}
		results = append(results, r)
	}
	// Stable, so that equal plans keep the simpler-first candidate order.
	slices.SortStableFunc(results, func(a, b Result) int {
		if opt.ImageBytes > 0 {
			if c := cmp.Compare(a.ETA, b.ETA); c != 0 {
				return c
			}
		}
		return cmp.Compare(b.Rate, a.Rate)
	})
	return results, nil
}

// Arrange places the network's nodes on a tree the way Rank places them
// for its candidates, for a shape chosen by the operator. The tree must
// have as many nodes as the network.
func Arrange(net Network, tree Tree, comp Compression) (Plan, error) {
	f, err := compile(net)
	if err != nil {
		return Plan{}, err
	}
	source, nodes, err := f.roles()
	if err != nil {
		return Plan{}, err
	}
	if tree.Nodes() != len(nodes) {
		return Plan{}, fmt.Errorf("a tree of %d nodes for a network of %d", tree.Nodes(), len(nodes))
	}
	hosts := f.names(source, assignHosts(tree, f.placement(source, nodes)))
	return Plan{Tree: tree, Hosts: hosts, Compression: comp}, nil
}

// roles finds the one source and the nodes.
func (f *fabric) roles() (source int, nodes []int, err error) {
	source = -1
	for i, h := range f.net.Hosts {
		if h.isSource() {
			if source >= 0 {
				return 0, nil, fmt.Errorf("hosts %s and %s are both sources: a cast has one source",
					f.net.Hosts[source].Name, h.Name)
			}
			source = i
			continue
		}
		nodes = append(nodes, i)
	}
	if source < 0 {
		return 0, nil, fmt.Errorf("no source host: give one host the role source")
	}
	if len(nodes) == 0 {
		return 0, nil, fmt.Errorf("no nodes to cast to")
	}
	return source, nodes, nil
}

// candidates builds the generated plans and appends the explicit ones.
func (f *fabric) candidates(opt Options) ([]Plan, error) {
	source, nodes, err := f.roles()
	if err != nil {
		return nil, err
	}
	groups := f.placement(source, nodes)
	n := len(nodes)
	trees := []Tree{Chain(n)}
	for fanout := 2; fanout <= opt.MaxFanout && fanout < n; fanout++ {
		trees = append(trees, NaryTree(n, fanout))
	}
	if n > 1 {
		trees = append(trees, Star(n))
	}
	hosts := make([][]string, len(trees))
	for i, t := range trees {
		hosts[i] = f.names(source, assignHosts(t, groups))
	}
	compressions := []Compression{{}}
	if opt.Compression.Enabled() {
		compressions = append(compressions, opt.Compression)
	}
	var plans []Plan
	for _, c := range compressions {
		for i, t := range trees {
			plans = append(plans, Plan{Tree: t, Hosts: hosts[i], Compression: c})
		}
	}
	return append(plans, opt.Explicit...), nil
}

// placement groups the nodes by switch, switches in depth-first order
// from the source's switch, fastest links first within a switch. Handing
// out the groups in this order along a depth-first walk of a tree keeps
// each subtree on few switches, so few channels cross inter-switch links:
// a chain crosses each of them at most once per direction.
func (f *fabric) placement(source int, nodes []int) [][]int {
	bySwitch := make([][]int, f.switches)
	for _, i := range nodes {
		bySwitch[f.hostSw[i]] = append(bySwitch[f.hostSw[i]], i)
	}
	neighbours := make([][]int, f.switches)
	for _, t := range f.trunks {
		neighbours[t.a] = append(neighbours[t.a], t.b)
		neighbours[t.b] = append(neighbours[t.b], t.a)
	}
	var groups [][]int
	seen := make([]bool, f.switches)
	var visit func(s int)
	visit = func(s int) {
		seen[s] = true
		if hosts := bySwitch[s]; len(hosts) > 0 {
			slices.SortStableFunc(hosts, func(a, b int) int {
				return cmp.Compare(f.net.Hosts[b].Link, f.net.Hosts[a].Link)
			})
			groups = append(groups, hosts)
		}
		for _, next := range neighbours[s] {
			if !seen[next] {
				visit(next)
			}
		}
	}
	visit(f.hostSw[source])
	// Switches the source cannot reach still get placed; evaluation then
	// reports the missing path.
	for s := range f.switches {
		if !seen[s] {
			visit(s)
		}
	}
	return groups
}

// assignHosts maps the tree's vertices 1..n to the grouped hosts and
// returns the host of every vertex (vertex 0, the source, is left 0).
// Vertices are taken in depth-first pre-order, so each group gets a run of
// vertices that mostly share subtrees; within a group the vertices that
// forward to most children get the fastest links.
func assignHosts(t Tree, groups [][]int) []int {
	kids := t.ChildLists()
	preorder := make([]int, 0, len(t.Parent))
	stack := []int{0}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if v != 0 {
			preorder = append(preorder, v)
		}
		for i := len(kids[v]) - 1; i >= 0; i-- {
			stack = append(stack, kids[v][i])
		}
	}
	host := make([]int, len(t.Parent))
	for _, g := range groups {
		block := preorder[:len(g)]
		preorder = preorder[len(g):]
		slices.SortStableFunc(block, func(a, b int) int { return cmp.Compare(len(kids[b]), len(kids[a])) })
		for i, v := range block {
			host[v] = g[i]
		}
	}
	return host
}

// names returns the host names of a vertex→host mapping with the source
// as vertex 0.
func (f *fabric) names(source int, host []int) []string {
	names := make([]string, len(host))
	names[0] = f.net.Hosts[source].Name
	for v := 1; v < len(host); v++ {
		names[v] = f.net.Hosts[host[v]].Name
	}
	return names
}
