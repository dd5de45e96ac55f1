package capacity

import "fmt"

// Role says whether a host serves the image or receives it.
type Role string

const (
	RoleSource Role = "source" // serves the image (dolly-server)
	RoleNode   Role = "node"   // receives the image and may forward it
)

// Network is the physical network: passive switches, the hosts hanging off
// them and the links between switches. Links are full duplex; a capacity
// holds for each direction on its own.
type Network struct {
	Switches []Switch
	Hosts    []Host
	Links    []SwitchLink
	// Machines describe machines that several hosts share (see
	// Host.Machine), by name; a machine not listed has no figures of its own.
	Machines map[string]Machine
	// LinkEfficiency is the share of a link's capacity left for the
	// stream's bytes after Ethernet, IP and TCP headers (and, on a real
	// wire, preamble and inter-frame gap). Zero means 1: capacities are
	// already in payload bytes, as the paper's figures are.
	LinkEfficiency float64
}

// TCPEthernetEfficiency is the payload share of a full-size TCP segment
// on Ethernet: 1448 payload bytes (TCP timestamps on) of 1538 on the wire,
// counting preamble, header, FCS and inter-frame gap.
const TCPEthernetEfficiency = 1448.0 / 1538.0

func (n Network) linkEfficiency() float64 {
	if n.LinkEfficiency <= 0 || n.LinkEfficiency > 1 {
		return 1
	}
	return n.LinkEfficiency
}

// Machine is what hosts that share one machine cost beyond their own
// figures.
type Machine struct {
	// Contention is the share of its CPU cost per byte that each host pays
	// more for every other host of the cast on the machine: their context
	// switches, wake-ups and cache misses, which no host's own probe
	// sees. m hosts cost Σ coefficients · (1 + Contention·(m−1+Beside)).
	Contention float64
	// Beside counts the cast's hosts on the machine that run beside the
	// plan evaluated but are not in it (nodes served apart): they take
	// their turns on its cores all the same.
	Beside int
	// CastCost is the CPU time, in seconds per byte the cast sends, that
	// the machine pays once for the whole cast however many of its hosts
	// take part: on a box running a chain of emulated hosts, the work of
	// keeping their pipeline of relays fed (cores left waiting for one
	// another's wake-ups), which no host's probe sees and which does not
	// grow with the chain.
	CastCost float64
	// SharedDisk says the machine's hosts write to one disk (targets that
	// are files on one file system, say), so their writes add up against
	// its rate: each host's figure is the disk's alone.
	SharedDisk bool
	// DiskBytesPerSec is what that shared disk took with all the
	// machine's hosts writing at once, in bytes per second, when it was
	// measured so: one writer alone keeps a shorter queue than a cast's
	// many, so its figure may be far off the disk's. 0: each host's own
	// figure is the disk's rate.
	DiskBytesPerSec float64
	// Crowded says its hosts' CPU figures were measured by all of them at
	// once, so what they cost each other is in the figures already.
	Crowded bool
	// BusyShare is the part of the machine's CPU time that is busy when
	// all its hosts stream at once as fast as its CPUs let them: the rest
	// is cores left idle while each host waits for the one before, which
	// take their part of every thread's time. The model counts all of the
	// hosts' work at 1/BusyShare times its cost. The kernel's threads'
	// work for their streams (the deferred receives and queue timers of
	// virtual or shaped links) is in their link figures
	// (Probe.LinkStreamBytesPerSec), by the byte. 0: all of it is busy.
	BusyShare float64
}

// Switch is a passive switch. It routes streams but cannot duplicate them.
type Switch struct {
	Name      string
	Backplane float64 // switching capacity in bytes/s; 0 = not modelled
}

// Host is a machine with one link to a switch.
type Host struct {
	Name      string
	Switch    string  // the switch the host's link goes to
	Link      float64 // link capacity per direction, bytes/s; 0 = not known, not modelled
	Role      Role    // RoleSource or RoleNode; empty means RoleNode
	Resources Resources
	// Machine names the machine the host runs on when several hosts share
	// one (emulated hosts on a test box, several nodes on one PC): their
	// CPU and memory demands add up against that machine's.
	Machine string
}

// SwitchLink is a full-duplex link between two switches.
type SwitchLink struct {
	A, B     string
	Capacity float64 // per direction, bytes/s
}

// isSource reports whether the host serves the image.
func (h Host) isSource() bool { return h.Role == RoleSource }

// fabric is a Network indexed for evaluation: names resolved to indices,
// directed links named once, and a next-hop table between switches.
type fabric struct {
	net       Network
	hostIndex map[string]int
	hostSw    []int    // switch index of each host
	upName    []string // "host→switch" for each host
	downName  []string // "switch→host" for each host
	trunks    []trunk
	switches  int
	// hop[from*switches+to] is the first step from switch from towards
	// switch to; trunk is -1 when no path exists.
	hop []hop
}

type trunk struct {
	a, b     int
	capacity float64
	name     [2]string // a→b, b→a
}

type hop struct {
	trunk   int
	forward bool // travels the trunk from a to b
	next    int  // switch reached
}

// compile checks the network and indexes it.
func compile(net Network) (*fabric, error) {
	f := &fabric{net: net, switches: len(net.Switches), hostIndex: make(map[string]int, len(net.Hosts))}
	switchIndex := make(map[string]int, len(net.Switches))
	for i, s := range net.Switches {
		if s.Name == "" {
			return nil, fmt.Errorf("switch %d has no name", i+1)
		}
		if _, dup := switchIndex[s.Name]; dup {
			return nil, fmt.Errorf("switch %q is listed twice", s.Name)
		}
		switchIndex[s.Name] = i
	}
	for name, m := range net.Machines {
		if m.Contention < 0 || m.Contention > 1 {
			return nil, fmt.Errorf("machine %s: contention %v: want a share from 0 to 1", name, m.Contention)
		}
		if m.CastCost < 0 {
			return nil, fmt.Errorf("machine %s: cast cost %v: want 0 or more", name, m.CastCost)
		}
		if m.Beside < 0 {
			return nil, fmt.Errorf("machine %s: %d hosts beside the plan: want 0 or more", name, m.Beside)
		}
		if !(m.BusyShare >= 0 && m.BusyShare <= 1) {
			return nil, fmt.Errorf("machine %s: busy share %v: want a share from 0 to 1", name, m.BusyShare)
		}
	}
	f.hostSw = make([]int, len(net.Hosts))
	f.upName = make([]string, len(net.Hosts))
	f.downName = make([]string, len(net.Hosts))
	for i, h := range net.Hosts {
		if h.Name == "" {
			return nil, fmt.Errorf("host %d has no name", i+1)
		}
		if _, dup := f.hostIndex[h.Name]; dup {
			return nil, fmt.Errorf("host %q is listed twice", h.Name)
		}
		if _, dup := switchIndex[h.Name]; dup {
			return nil, fmt.Errorf("host %q has the name of a switch: names must be unique", h.Name)
		}
		f.hostIndex[h.Name] = i
		s, ok := switchIndex[h.Switch]
		if !ok {
			return nil, fmt.Errorf("host %q hangs off unknown switch %q", h.Name, h.Switch)
		}
		if h.Link < 0 {
			return nil, fmt.Errorf("host %q has a negative link capacity", h.Name)
		}
		if h.Role != "" && h.Role != RoleSource && h.Role != RoleNode {
			return nil, fmt.Errorf("host %q has unknown role %q: want source or node", h.Name, h.Role)
		}
		if err := h.Resources.validate(); err != nil {
			return nil, fmt.Errorf("host %q: %w", h.Name, err)
		}
		f.hostSw[i] = s
		f.upName[i] = h.Name + "→" + h.Switch
		f.downName[i] = h.Switch + "→" + h.Name
	}
	for _, l := range net.Links {
		a, okA := switchIndex[l.A]
		b, okB := switchIndex[l.B]
		if !okA || !okB || a == b {
			return nil, fmt.Errorf("link %s–%s must join two different known switches", l.A, l.B)
		}
		if l.Capacity <= 0 {
			return nil, fmt.Errorf("link %s–%s has no capacity", l.A, l.B)
		}
		f.trunks = append(f.trunks, trunk{a: a, b: b, capacity: l.Capacity,
			name: [2]string{l.A + "→" + l.B, l.B + "→" + l.A}})
	}
	f.buildRoutes()
	return f, nil
}

// buildRoutes fills the next-hop table with shortest paths (fewest hops),
// found by a breadth-first search back from every destination switch. On a
// tree of switches this is the only path.
func (f *fabric) buildRoutes() {
	n := f.switches
	type edge struct{ trunk, to int }
	adj := make([][]edge, n)
	for i, t := range f.trunks {
		adj[t.a] = append(adj[t.a], edge{i, t.b})
		adj[t.b] = append(adj[t.b], edge{i, t.a})
	}
	f.hop = make([]hop, n*n)
	for i := range f.hop {
		f.hop[i].trunk = -1
	}
	queue := make([]int, 0, n)
	for to := range n {
		seen := make([]bool, n)
		seen[to] = true
		queue = append(queue[:0], to)
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			for _, e := range adj[s] {
				if seen[e.to] {
					continue
				}
				seen[e.to] = true
				// From e.to the first step towards "to" is back over e.
				f.hop[e.to*n+to] = hop{trunk: e.trunk, forward: f.trunks[e.trunk].a == e.to, next: s}
				queue = append(queue, e.to)
			}
		}
	}
}

// route calls visit for every trunk direction on the path from switch a to
// switch b and every switch after a; it fails when b cannot be reached.
func (f *fabric) route(a, b int, visit func(trunk int, forward bool, sw int)) error {
	for s := a; s != b; {
		h := f.hop[s*f.switches+b]
		if h.trunk < 0 {
			return fmt.Errorf("no path from switch %s to switch %s: add an inter-switch link",
				f.net.Switches[a].Name, f.net.Switches[b].Name)
		}
		visit(h.trunk, h.forward, h.next)
		s = h.next
	}
	return nil
}
