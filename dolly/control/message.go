// Package control is the control connection between dolly-server and each
// node: length-prefixed JSON messages (join, assignment, progress, verdict,
// rewiring) and, in a keyed cast, the key handshake and a tag on every
// message. docs/protocol.md lists the messages.
package control

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"dolly/dolly/stream"
)

// Control messages travel on one TCP connection per node, each as a 4-byte
// little-endian length followed by a JSON object with a "type" field.

// MaxMessage bounds one control message; longer ones are refused before
// anything is allocated for them.
const MaxMessage = 1 << 20

// MsgType names a control message.
type MsgType string

const (
	MsgHello MsgType = "hello" // node → server: who I am
	// In a keyed cast, before the welcome: the server proves it knows the
	// cast key, then the node does (see auth.go).
	MsgChallenge MsgType = "challenge" // server → node: my nonce and proof
	MsgProof     MsgType = "proof"     // node → server: my proof
	MsgWelcome   MsgType = "welcome"   // server → node: the cast and image
	MsgReject    MsgType = "reject"    // server → node: you cannot join
	MsgReady     MsgType = "ready"     // node → server: my target is checked
	MsgAssign    MsgType = "assign"    // server → node: your place in the plan
	MsgProgress  MsgType = "progress"  // node → server: bytes so far
	MsgDone      MsgType = "done"      // node → server: written and verified
	MsgFail      MsgType = "fail"      // node → server: I failed, and why
	MsgResult    MsgType = "result"    // server → node: the server's verdict
	MsgAbort     MsgType = "abort"     // server → node: the cast is off
	// A node that captures its disk (dolly capture), once welcomed, says
	// what it sends, then sends the stream on the same connection.
	MsgCapture MsgType = "capture" // node → server: the disk's size and block map

	// While the cast runs, the server rewires around failed nodes.
	MsgAttach       MsgType = "attach"        // server → node: send the stream to this child too
	MsgDetach       MsgType = "detach"        // server → node: stop sending to this child
	MsgAttachFailed MsgType = "attach-failed" // node → server: could not serve that child
	MsgChildLost    MsgType = "child-lost"    // node → server: a child's connection failed
	MsgPing         MsgType = "ping"          // server → node: I am here
	MsgCatchUp      MsgType = "catch-up"      // server → node: the plan's nodes are done, stop yielding

	// Before the plan, the server measures the network with bandwidth
	// probes (see dolly/probe).
	MsgNetProbe  MsgType = "net-probe"  // server → node: send this probe to that node
	MsgNetResult MsgType = "net-result" // node → server: what I received of a probe, or why I could not send it
	// Nodes that share a machine with more of them than it has cores
	// measure their data path all at once: what they cost each other.
	MsgCrowdProbe MsgType = "crowd-probe" // server → node: measure your data path now (net-result answers)
	MsgShare      MsgType = "share"       // server → node: your machine's cores are shared, keep to your part
)

// Message is one control message; the field matching Type is set.
type Message struct {
	Type     MsgType   `json:"type"`
	Hello    *Hello    `json:"hello,omitempty"`
	Welcome  *Welcome  `json:"welcome,omitempty"`
	Ready    *Ready    `json:"ready,omitempty"`
	Assign   *Assign   `json:"assign,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	Done     *Done     `json:"done,omitempty"`
	Result   *Result   `json:"result,omitempty"`
	// Capture is a capturing node's disk: in its hello (Source and Size),
	// then whole in a capture message.
	Capture *Capture `json:"capture,omitempty"`
	// Peer is the child of an attach, detach, attach-failed or child-lost.
	Peer *Peer `json:"peer,omitempty"`
	// NetProbe and NetResult are a bandwidth probe's order and outcome.
	NetProbe  *NetProbe  `json:"net_probe,omitempty"`
	NetResult *NetResult `json:"net_result,omitempty"`
	// CrowdProbe orders a measurement of the node's data path, run by
	// every node of its machine at once; a net-result carries the rate.
	CrowdProbe *CrowdProbe `json:"crowd_probe,omitempty"`
	// Share is a node's part of its machine's cores.
	Share *Share `json:"share,omitempty"`
	// Auth is the challenge or the proof of a keyed cast's handshake.
	Auth *Auth `json:"auth,omitempty"`
	// Reason explains a reject, fail, abort, attach-failed or child-lost.
	Reason string `json:"reason,omitempty"`
}

// Hello introduces a node.
type Hello struct {
	Version int      `json:"version"`
	Name    string   `json:"name"`
	MACs    []string `json:"macs,omitempty"`
	// Machine tells machines apart: the same on every node that runs on
	// one kernel, network namespaces and all (see probe.MachineID).
	Machine  string `json:"machine,omitempty"`
	DataAddr string `json:"data_addr"` // where upstream connects; an empty host means "the address I connect from"
	Target   string `json:"target,omitempty"`
	// Nonce is set by a node that has a cast key: the server must prove it
	// knows the key over it.
	Nonce []byte `json:"nonce,omitempty"`
	// Resume is set by a node that is part of a cast already: it lost the
	// server and comes back, to a restarted server or the same one.
	Resume *Resume `json:"resume,omitempty"`
	// Enroll is set, with Nonce, by a node that has no cast key but the
	// server's public key (a netbooted PC): its ephemeral X25519 public
	// key. The server proves its identity and hands the node the cast key
	// over the session they agree (see Enroll).
	Enroll []byte `json:"enroll,omitempty"`
	// Capture is set by a node that sends its disk to a capturing server
	// (dolly capture) rather than joining a cast: its source and size.
	Capture *Capture `json:"capture,omitempty"`
}

// Capture describes the disk a node sends to be stored as an image. Once
// welcomed, the node sends the stream (zstd) on the same connection, and
// the server answers with a result.
type Capture struct {
	Source string `json:"source"` // the disk or partition, as the node names it
	Size   int64  `json:"size"`   // its raw bytes
	// UsedMap is its file systems' block map (blockmap.Map.Encode), if the
	// node could read one: the blocks it leaves out are sent as zeros, and
	// the server stores the map with the image.
	UsedMap []byte `json:"used_map,omitempty"`
}

// Resume is what a node in a cast brings to the server it reconnects to.
type Resume struct {
	Cast        stream.CastID `json:"cast"`
	Fingerprint string        `json:"fingerprint"` // of the image, as the first server saw it
	Encoding    string        `json:"encoding"`    // how the stream travels
	FrameSize   int           `json:"frame_size"`
	Pos         int64         `json:"pos"` // stream bytes received so far
	Target      string        `json:"target"`
	// Done is set once the node has the whole image; Digest is then its
	// content digest, which the server has not confirmed yet.
	Done   bool   `json:"done"`
	Digest string `json:"digest,omitempty"`
	// Encoder is the welcome's: what compressed a raw image on the fly.
	Encoder string `json:"encoder,omitempty"`
}

// Auth is one step of the key handshake.
type Auth struct {
	Nonce []byte `json:"nonce,omitempty"` // the server's, in the challenge
	Proof []byte `json:"proof,omitempty"`
	// Ephemeral and Signature answer an enrolling node: the server's
	// ephemeral X25519 public key, and its identity's signature over the
	// hello, both nonces and that key.
	Ephemeral []byte `json:"ephemeral,omitempty"`
	Signature []byte `json:"signature,omitempty"`
}

// Welcome describes the cast to a node that may join.
type Welcome struct {
	Cast        stream.CastID `json:"cast"`
	Image       string        `json:"image"`
	ImageSize   int64         `json:"image_size"` // raw bytes each target must hold
	Target      string        `json:"target"`     // the server's default target, if any
	Fingerprint string        `json:"fingerprint"`
	// Resumed says the server takes the node's cast up where it was.
	Resumed bool `json:"resumed,omitempty"`
	// Encrypted says frames are encrypted as well as authenticated (in a
	// keyed cast; the welcome of one travels authenticated).
	Encrypted bool `json:"encrypted,omitempty"`
	// MeasureTarget lets the node measure its target's write rate (which
	// writes back what it read): the admin has said yes in advance. Without
	// it nothing is written to a target before the cast.
	MeasureTarget bool `json:"measure_target,omitempty"`
	// Probe asks the node to measure its machine for the capacity model:
	// the first node of each machine does, and the others of that machine
	// share its figures, as they share its hardware.
	Probe bool `json:"probe,omitempty"`
	// SkipDecoders are the codecs no plan of this cast decodes: the probe
	// need not time them.
	SkipDecoders []string `json:"skip_decoders,omitempty"`
	// DataToken, in a cast without a key, is the node's own: a peer opening
	// its data connection must prove it knows it (see stream.NewToken).
	DataToken []byte `json:"data_token,omitempty"`
	// ProbeToken is the node's other token (unkeyed casts), for bandwidth
	// probes only: the peers that probe a node must not be able to feed it.
	ProbeToken []byte `json:"probe_token,omitempty"`
	// SignKey, in a keyed cast, is the Ed25519 public key the source signs
	// every frame with: a node takes no frame it did not sign.
	SignKey []byte `json:"sign_key,omitempty"`
	// SignKeySig is the server identity's signature over the cast ID and
	// SignKey (control.SignSignKey).
	SignKeySig []byte `json:"sign_key_sig,omitempty"`
	// SealedKey, for an enrolled node, is the cast key sealed under the
	// session it agreed with the server (see OpenCastKey).
	SealedKey []byte `json:"sealed_key,omitempty"`
	// Encoder, for a raw image, names the encoder that would compress it
	// on the fly (imaging.EncoderID): a server that takes the cast up
	// again must have the same one.
	Encoder string `json:"encoder,omitempty"`
	// UsedMap, for an image read through its file system's block map,
	// is that map (blockmap.Map.Encode): the node may discard or leave
	// what it does not mark in use rather than zero it.
	UsedMap []byte `json:"used_map,omitempty"`
	// Disk, for the image of a whole disk, is its partition layout: the
	// node fits the table to its own disk once the image is written.
	Disk *DiskLayout `json:"disk,omitempty"`
}

// DiskLayout is what the image of a whole disk asks of a target.
type DiskLayout struct {
	Table string `json:"table"` // "GPT" or "MBR"
	// MinSize is the smallest target that holds every partition (and a
	// GPT's backup table): a smaller one is refused before the cast.
	MinSize int64 `json:"min_size"`
	// GrowLast has the last partition grow to the end of the target, and
	// its file system with it where the node can.
	GrowLast bool `json:"grow_last,omitempty"`
	// Parts are the partitions, each its offset and length in bytes: the
	// node zeroes their ends where free (imaging.SkipFree).
	Parts [][2]int64 `json:"parts,omitempty"`
}

// Ready reports a checked target and, unless the node was told not to
// measure itself, its probe for the capacity model. The probe travels as
// the node encoded it: the protocol does not look into it.
type Ready struct {
	Target     string `json:"target"`
	TargetSize int64  `json:"target_size"`
	Block      bool   `json:"block"`
	// CachedBy is the file behind a target that is a loop device without
	// direct I/O: its writes fill that file's page cache first.
	CachedBy string          `json:"cached_by,omitempty"`
	Probe    json.RawMessage `json:"probe,omitempty"`
}

// Peer is another node on the data path.
type Peer struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	Token []byte `json:"token,omitempty"` // its data token, when sending to it (unkeyed casts)
	// Paced, when sending to it, says the child is served at its own
	// pace: a slower node the plan serves apart, which must never hold
	// back the others (see relay.AttachPaced).
	Paced bool `json:"paced,omitempty"`
}

// Assign places a node in the plan.
type Assign struct {
	Upstream string `json:"upstream"` // name of the sender, for messages
	Children []Peer `json:"children"`
	// Encoding is how the stream travels ("raw", "zstd", "gzip"): the plan
	// may send an image otherwise than it is stored.
	Encoding string `json:"encoding"`
	// Yield, for a node served apart on a machine it shares with nodes of
	// the plan, has it decode and write only as its relay's history fills
	// (relay.Relay.Yield), until MsgCatchUp: the plan's nodes then get the
	// machine's cores first, while its link takes the stream as it comes.
	Yield bool `json:"yield,omitempty"`
}

// Progress is a node's periodic report; it is also how the server knows
// the node is alive.
type Progress struct {
	Stream  int64 `json:"stream"`  // stream bytes received and verified
	Written int64 `json:"written"` // raw bytes on the target
	Pos     int64 `json:"pos"`     // stream bytes received (and passed on)
	// HeldBy names the child this node's relay waited for most since the
	// last report, if that was more than half the time: a child too slow
	// for the stream.
	HeldBy string `json:"held_by,omitempty"`
	// Starved is the share of the time since the last report that the
	// relay waited for its upstream's data (0 to 1): near 1, the node
	// gets less than it could take.
	Starved float64 `json:"starved,omitempty"`
}

// Done is a node's final report.
type Done struct {
	Digest  string  `json:"digest"`
	Written int64   `json:"written"`
	Seconds float64 `json:"seconds"`
	// Pos is the stream bytes received: the whole stream.
	Pos int64 `json:"pos,omitempty"`
	// Lost names children the node could not keep sending to.
	Lost []string `json:"lost,omitempty"`
	// CPU is the CPU time, in seconds, the node's process used from its
	// assignment to this report: what its part of the cast cost.
	CPU float64 `json:"cpu,omitempty"`
}

// Result is the server's verdict on a node.
type Result struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	// After is what a netbooted node does once the cast is over: "reboot",
	// "poweroff", "shell" or "" (just exit).
	After string `json:"after,omitempty"`
}

// NetProbe tells a node to send a bandwidth probe to another node's data
// listener: for Seconds, and no more than Bytes. With After, the node sends
// once the probe After it receives has ended, or AfterSeconds after the
// order came if that probe never does: an order sent before a probe that
// fills the links cannot be held up behind it.
type NetProbe struct {
	ID           uint64  `json:"id"`
	To           string  `json:"to"`              // the receiver's data address
	Token        []byte  `json:"token,omitempty"` // the receiver's probe token (unkeyed casts)
	Seconds      float64 `json:"seconds"`
	Bytes        int64   `json:"bytes"`
	After        uint64  `json:"after,omitempty"`
	AfterSeconds float64 `json:"after_seconds,omitempty"`
}

// CrowdProbe measures what the nodes of one machine cost each other, in
// two steps sent to all of them at once. Without Go, the node sets its data
// path up (its relay, over loopback), warms it and answers with an empty
// NetResult for ID. With Go, it pushes through the data path set up under
// ID without a pause, counts what passes it over WindowMillis from
// SettleMillis on (when all of them push), and a NetResult answers with
// those Bytes and the Rate they went at (see probe.StartCrowd). With Disk,
// the data path is the node's write path to its target, and what counts
// is what reaches the disk (see probe.StartDiskCrowd). With Decode, the
// node decodes the standard sample with zstd on one thread, and what
// counts is what it decoded and that thread's CPU time (see
// probe.StartDecodeCrowd).
type CrowdProbe struct {
	ID           uint64 `json:"id"`
	Disk         bool   `json:"disk,omitempty"`
	Decode       bool   `json:"decode,omitempty"`
	Go           bool   `json:"go,omitempty"`
	SettleMillis int    `json:"settle_ms,omitempty"`
	WindowMillis int    `json:"window_ms,omitempty"`
}

// Share tells a node that its machine holds more of the cast's hosts than
// it has cores (the demo, an emulated lab, a VM host): the node runs its Go
// code on at most Procs threads at once (GOMAXPROCS; none fewer than one,
// none more than its cores). It is sent once all have joined, before the
// network and crowd probes, with 1: a program that may run on every core
// wakes idle threads to look for work at each hand-off, and on a machine
// with no idle core that search is paid for by the others. It is sent
// again before the places of a cast whose stream is compressed, with 2:
// the node's relay then waits for its bytes on a thread of its own, not
// behind its decoding.
//
// With WakeMillis, sent before the places of a cast that the machine's
// cores hold back, the node's relay gathers that much of its upstream's
// stream (in time, at the rate it comes) before it wakes: on a crowded
// machine every wake-up is paid for with the others' CPU. Procs is then 0
// where the threads stay as they are.
type Share struct {
	Procs      int `json:"procs"`
	WakeMillis int `json:"wake_ms,omitempty"`
}

// NetResult is what a node received of probe ID (Bytes, and Rate in bytes
// per second over its steady part), or, from its sender, why it could not
// be sent (Error).
type NetResult struct {
	ID    uint64  `json:"id"`
	Bytes int64   `json:"bytes,omitempty"`
	Rate  float64 `json:"rate,omitempty"`
	// CPU is the CPU time, in seconds, the receiving node's process used
	// while it counted a bandwidth probe: in a ring, where it sends its
	// own at the same time, what a stream in and out at the link's pace
	// costs it. For a disk crowd it is the whole machine's busy time over
	// the window, all cores and kernel threads: what the writes of every
	// node on it cost; for a decoders' crowd, the decoding thread's own.
	CPU float64 `json:"cpu,omitempty"`
	// WindowFrom and WindowTo bound a disk crowd's window on the node's
	// machine's clock (Unix nanoseconds), and BusyFrom and BusyTo are the
	// machine's busy time since boot at each, in seconds. The nodes of one
	// machine, told one by one, open their windows a little apart; the
	// server times the machine's CPU over the part all of them share.
	WindowFrom int64   `json:"window_from,omitempty"`
	WindowTo   int64   `json:"window_to,omitempty"`
	BusyFrom   float64 `json:"busy_from,omitempty"`
	BusyTo     float64 `json:"busy_to,omitempty"`
	// MachineCPU is, for a bandwidth probe, the whole machine's busy time
	// in seconds over the same span (all cores, kernel threads included):
	// the softirqs and qdisc timers that move a stream through a shaped
	// link run in kernel threads, which no process's own time shows.
	MachineCPU float64 `json:"machine_cpu,omitempty"`
	// MachineIdle is the time its CPUs were idle (or waited for a disk)
	// over the span: a ring that kept them busy measured what the CPU let
	// through, not the links.
	MachineIdle float64 `json:"machine_idle,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// validate checks that the body matching the type is present.
func (m *Message) validate() error {
	missing := false
	switch m.Type {
	case MsgHello:
		missing = m.Hello == nil
	case MsgWelcome:
		missing = m.Welcome == nil
	case MsgReady:
		missing = m.Ready == nil
	case MsgAssign:
		missing = m.Assign == nil
	case MsgProgress:
		missing = m.Progress == nil
	case MsgDone:
		missing = m.Done == nil
	case MsgResult:
		missing = m.Result == nil
	case MsgCapture:
		missing = m.Capture == nil
	case MsgAttach, MsgDetach, MsgAttachFailed, MsgChildLost:
		missing = m.Peer == nil
	case MsgNetProbe:
		missing = m.NetProbe == nil
	case MsgNetResult:
		missing = m.NetResult == nil
	case MsgCrowdProbe:
		missing = m.CrowdProbe == nil
	case MsgShare:
		missing = m.Share == nil
	case MsgChallenge, MsgProof:
		missing = m.Auth == nil
	case MsgReject, MsgFail, MsgAbort, MsgPing, MsgCatchUp:
	default:
		return fmt.Errorf("unknown control message type %q", m.Type)
	}
	if missing {
		return fmt.Errorf("control message %q without its body", m.Type)
	}
	m.sanitize()
	return nil
}

// sanitize escapes what a peer sends for people to read (reasons,
// messages, paths) before it can reach a terminal or a log: a peer, keyed
// or not, must not be able to move the cursor or rewrite the console.
func (m *Message) sanitize() {
	m.Reason = Printable(m.Reason)
	if m.Result != nil {
		m.Result.Message = Printable(m.Result.Message)
	}
	if m.Ready != nil {
		m.Ready.Target = Printable(m.Ready.Target)
	}
	if h := m.Hello; h != nil {
		h.Name, h.Target, h.DataAddr, h.Machine = Printable(h.Name), Printable(h.Target), Printable(h.DataAddr), Printable(h.Machine)
		printableAll(h.MACs)
		if r := h.Resume; r != nil {
			r.Target, r.Encoding, r.Encoder, r.Digest, r.Fingerprint = Printable(r.Target), Printable(r.Encoding), Printable(r.Encoder), Printable(r.Digest), Printable(r.Fingerprint)
		}
	}
	if w := m.Welcome; w != nil {
		w.Image, w.Target, w.Encoder = Printable(w.Image), Printable(w.Target), Printable(w.Encoder)
	}
	if p := m.Peer; p != nil {
		p.Name, p.Addr = Printable(p.Name), Printable(p.Addr)
	}
	if a := m.Assign; a != nil {
		a.Upstream, a.Encoding = Printable(a.Upstream), Printable(a.Encoding)
		for i := range a.Children {
			a.Children[i].Name, a.Children[i].Addr = Printable(a.Children[i].Name), Printable(a.Children[i].Addr)
		}
	}
	if p := m.Progress; p != nil {
		p.HeldBy = Printable(p.HeldBy)
	}
	if d := m.Done; d != nil {
		d.Digest = Printable(d.Digest)
		printableAll(d.Lost)
	}
	if r := m.NetResult; r != nil {
		r.Error = Printable(r.Error)
	}
	if p := m.NetProbe; p != nil {
		p.To = Printable(p.To)
	}
}

func printableAll(ss []string) {
	for i, s := range ss {
		ss[i] = Printable(s)
	}
}

// Printable escapes every rune of s that is not printable (control
// characters, escape sequences' ESC, bidirectional overrides) as Go
// would quote it, and leaves the rest as it is.
func Printable(s string) string {
	bad := func(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }
	if !strings.ContainsFunc(s, bad) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if bad(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
