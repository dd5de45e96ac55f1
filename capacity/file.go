package capacity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// Topology is a parsed topology file: the physical network, the resources
// of its hosts, an optional explicit logical tree and planning options.
// README.md documents the format.
type Topology struct {
	Name    string
	Network Network
	// Tree is the file's explicit tree, sent raw; nil when the file has none.
	Tree    *Plan
	Options Options
}

// ReadTopology parses a topology file from r.
func ReadTopology(r io.Reader) (*Topology, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read topology: %w", err)
	}
	return ParseTopology(data)
}

// ParseTopology parses a topology file. Unknown fields are errors so that
// a misspelt capacity is not silently ignored.
func ParseTopology(data []byte) (*Topology, error) {
	var tf topologyFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	t, err := tf.topology()
	if err != nil && tf.Name != "" {
		return nil, fmt.Errorf("topology %s: %w", tf.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return t, nil
}

// Rank ranks the generated plans together with the file's explicit tree,
// raw and, when the file gives a compression factor, compressed.
func (t *Topology) Rank() ([]Result, error) {
	opt := t.Options
	if t.Tree != nil {
		opt.Explicit = append(opt.Explicit, *t.Tree)
		if opt.Compression.Enabled() {
			compressed := *t.Tree
			compressed.Compression = opt.Compression
			opt.Explicit = append(opt.Explicit, compressed)
		}
	}
	return Rank(t.Network, opt)
}

type topologyFile struct {
	Name        string                   `json:"name"`
	Comment     string                   `json:"comment"`
	Switches    []switchFile             `json:"switches"`
	Links       []linkFile               `json:"links"`
	Profiles    map[string]resourcesFile `json:"profiles"`
	Hosts       []hostFile               `json:"hosts"`
	Machines    map[string]machineFile   `json:"machines"`
	Tree        map[string]string        `json:"tree"`
	Compression *Compression             `json:"compression"`
	Stored      *Compression             `json:"stored"`
	ZeroFrac    float64                  `json:"zero_fraction"`
	LinkEff     float64                  `json:"link_efficiency"`
	ImageSize   size                     `json:"image_size"`
	FrameSize   size                     `json:"frame_size"`
	Startup     duration                 `json:"startup"`
	MaxFanout   int                      `json:"max_fanout"`
}

type machineFile struct {
	Contention float64 `json:"contention"`
	// CastCPUPerGB is Machine.CastCost in CPU-seconds per GB (10^9
	// bytes) of the stream.
	CastCPUPerGB float64 `json:"cast_cpu_per_gb"`
}

type switchFile struct {
	Name      string `json:"name"`
	Backplane rate   `json:"backplane"`
}

type linkFile struct {
	A        string `json:"a"`
	B        string `json:"b"`
	Capacity rate   `json:"capacity"`
}

type hostFile struct {
	Name      string         `json:"name"`
	Switch    string         `json:"switch"`
	Link      rate           `json:"link"`
	Role      Role           `json:"role"`
	Machine   string         `json:"machine"`
	Profile   string         `json:"profile"`
	Resources *resourcesFile `json:"resources"`
	Probe     *Probe         `json:"probe"`
}

type resourcesFile struct {
	Model              NodeModel `json:"model"`
	Switching          rate      `json:"switching"`
	Disk               rate      `json:"disk"`
	IOBus              rate      `json:"io_bus"`
	Memory             rate      `json:"memory"`
	Cores              float64   `json:"cores"`
	ParallelDecompress bool      `json:"parallel_decompress"`
	CPU                cpuFile   `json:"cpu"`
}

type cpuFile struct {
	Net        rate            `json:"net"`
	Disk       rate            `json:"disk"`
	Copy       rate            `json:"copy"`
	Digest     rate            `json:"digest"`
	Decompress map[string]rate `json:"decompress"`
}

func (r resourcesFile) resources() Resources {
	res := Resources{
		Model:              r.Model,
		Switching:          float64(r.Switching),
		Disk:               float64(r.Disk),
		IOBus:              float64(r.IOBus),
		Memory:             float64(r.Memory),
		Cores:              r.Cores,
		ParallelDecompress: r.ParallelDecompress,
		CPU: CPURates{
			Net:    float64(r.CPU.Net),
			Disk:   float64(r.CPU.Disk),
			Copy:   float64(r.CPU.Copy),
			Digest: float64(r.CPU.Digest),
		},
	}
	if len(r.CPU.Decompress) > 0 {
		res.CPU.Decompress = make(map[string]float64, len(r.CPU.Decompress))
		for codec, v := range r.CPU.Decompress {
			res.CPU.Decompress[codec] = float64(v)
		}
	}
	return res
}

func (tf topologyFile) topology() (*Topology, error) {
	t := &Topology{Name: tf.Name}
	for _, s := range tf.Switches {
		t.Network.Switches = append(t.Network.Switches, Switch{Name: s.Name, Backplane: float64(s.Backplane)})
	}
	for _, l := range tf.Links {
		t.Network.Links = append(t.Network.Links, SwitchLink{A: l.A, B: l.B, Capacity: float64(l.Capacity)})
	}
	for _, hf := range tf.Hosts {
		h, err := tf.host(hf)
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", hf.Name, err)
		}
		t.Network.Hosts = append(t.Network.Hosts, h)
	}
	for name, m := range tf.Machines {
		if !slices.ContainsFunc(t.Network.Hosts, func(h Host) bool { return h.Machine == name }) {
			return nil, fmt.Errorf("machine %s: no host runs on it (give hosts \"machine\": %q)", name, name)
		}
		if m.Contention < 0 || m.Contention > 1 {
			return nil, fmt.Errorf("machine %s: contention %v: want a share from 0 to 1", name, m.Contention)
		}
		if t.Network.Machines == nil {
			t.Network.Machines = make(map[string]Machine, len(tf.Machines))
		}
		if m.CastCPUPerGB < 0 {
			return nil, fmt.Errorf("machine %s: cast_cpu_per_gb %v: want 0 or more", name, m.CastCPUPerGB)
		}
		t.Network.Machines[name] = Machine{Contention: m.Contention, CastCost: m.CastCPUPerGB / 1e9}
	}
	if c := tf.Compression; c != nil {
		if c.Enabled() && c.Codec == "" {
			return nil, fmt.Errorf("compression: give the codec (zstd or gzip)")
		}
		if c.Factor < 1 {
			return nil, fmt.Errorf("compression: factor %v is below 1: give raw bytes per compressed byte", c.Factor)
		}
		t.Options.Compression = *c
	}
	if c := tf.Stored; c != nil {
		if c.Enabled() && c.Codec == "" {
			return nil, fmt.Errorf("stored: give the codec (zstd or gzip)")
		}
		stored := *c
		t.Options.Stored = &stored
	}
	if tf.ZeroFrac < 0 || tf.ZeroFrac >= 1 {
		return nil, fmt.Errorf("zero_fraction %v: want a share from 0 up to (not including) 1", tf.ZeroFrac)
	}
	t.Options.ZeroFraction = tf.ZeroFrac
	if tf.LinkEff < 0 || tf.LinkEff > 1 {
		return nil, fmt.Errorf("link_efficiency %v: want a share up to 1", tf.LinkEff)
	}
	t.Network.LinkEfficiency = tf.LinkEff
	t.Options.ImageBytes = int64(tf.ImageSize)
	t.Options.FrameBytes = int64(tf.FrameSize)
	t.Options.Startup = time.Duration(tf.Startup)
	t.Options.MaxFanout = tf.MaxFanout
	if len(tf.Tree) > 0 {
		plan, err := explicitPlan(t.Network.Hosts, tf.Tree)
		if err != nil {
			return nil, fmt.Errorf("tree: %w", err)
		}
		t.Tree = &plan
	}
	return t, nil
}

// host resolves one host's resources: a named profile, inline resources or
// a probe. A host with none is left for Network.ApplyProbes.
func (tf topologyFile) host(hf hostFile) (Host, error) {
	h := Host{Name: hf.Name, Switch: hf.Switch, Link: float64(hf.Link), Role: hf.Role, Machine: hf.Machine}
	if h.Role == "" {
		h.Role = RoleNode
	}
	given := 0
	if hf.Profile != "" {
		given++
		p, ok := tf.Profiles[hf.Profile]
		if !ok {
			return Host{}, fmt.Errorf("unknown profile %q", hf.Profile)
		}
		h.Resources = p.resources()
	}
	if hf.Resources != nil {
		given++
		h.Resources = hf.Resources.resources()
	}
	if hf.Probe != nil {
		given++
		h.Resources = hf.Probe.Resources(h.Role)
		if h.Link <= 0 {
			h.Link = hf.Probe.NICBytesPerSec
		}
	}
	if given > 1 {
		return Host{}, fmt.Errorf("give one of profile, resources or probe, not %d", given)
	}
	return h, nil
}

// explicitPlan turns a child→parent map into a plan whose vertices are in
// breadth-first order from the source, so that parents precede children.
func explicitPlan(hosts []Host, parentOf map[string]string) (Plan, error) {
	source := ""
	known := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		known[h.Name] = true
		if h.isSource() {
			if source != "" {
				return Plan{}, fmt.Errorf("hosts %s and %s are both sources: a cast has one source", source, h.Name)
			}
			source = h.Name
		}
	}
	if source == "" {
		return Plan{}, fmt.Errorf("no source host to root the tree")
	}
	children := make(map[string][]string)
	for _, h := range hosts { // file order keeps the result deterministic
		if h.isSource() {
			if _, ok := parentOf[h.Name]; ok {
				return Plan{}, fmt.Errorf("the source %s cannot have a parent", h.Name)
			}
			continue
		}
		p, ok := parentOf[h.Name]
		if !ok {
			return Plan{}, fmt.Errorf("node %s has no parent: every node receives the image", h.Name)
		}
		if !known[p] {
			return Plan{}, fmt.Errorf("node %s has unknown parent %q", h.Name, p)
		}
		children[p] = append(children[p], h.Name)
	}
	for child := range parentOf {
		if !known[child] {
			return Plan{}, fmt.Errorf("unknown host %q", child)
		}
	}
	names := []string{source}
	parent := []int{-1}
	for v := 0; v < len(names); v++ {
		for _, c := range children[names[v]] {
			names = append(names, c)
			parent = append(parent, v)
		}
	}
	if len(names) != len(hosts) {
		return Plan{}, fmt.Errorf("%d hosts cannot be reached from the source %s: the parents form a cycle",
			len(hosts)-len(names), source)
	}
	tree, err := Explicit(parent)
	if err != nil {
		return Plan{}, err
	}
	return Plan{Tree: tree, Hosts: names}, nil
}

// duration is a JSON duration: a string such as "500ms" or seconds.
type duration time.Duration

func (d *duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = duration(v)
		return nil
	}
	var seconds float64
	if err := json.Unmarshal(data, &seconds); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"500ms\" or seconds", data)
	}
	*d = duration(seconds * float64(time.Second))
	return nil
}
