package server

import (
	"fmt"
	"time"

	"dolly/capacity"
)

// EventType says what an Event reports.
type EventType string

// The steps of a cast, in the order they come.
const (
	EvListening EventType = "listening" // the server took the image and listens: Image
	EvJoined    EventType = "joined"    // a node joined: Node, Text
	EvLeft      EventType = "left"      // a node left before the cast: Node, Text
	EvPlan      EventType = "plan"      // the plan that will run: Plan
	EvStarted   EventType = "started"   // the stream began
	EvProgress  EventType = "progress"  // every node of the cast, about once a second: Nodes, SentBytes
	EvFailed    EventType = "failed"    // a node is out of the cast: Node, Text (with the rewiring)
	EvRewired   EventType = "rewired"   // the stream's paths changed (a node late, back, served apart): Node, Text
	EvReplanned EventType = "replanned" // the running cast was checked against its prediction: Text
	EvVerified  EventType = "verified"  // a node's target matched the image's digest: Node
	EvRejected  EventType = "rejected"  // a node's target did not: Node, Text
	EvSummary   EventType = "summary"   // the cast is over: Summary (also when it never started)
)

// An Event is one step of a cast. Text is the line the terminal shows
// for it, where it shows one.
type Event struct {
	Type      EventType  `json:"type"`
	Time      time.Time  `json:"time"`
	Node      string     `json:"node,omitempty"`
	Text      string     `json:"text,omitempty"`
	Image     *ImageInfo `json:"image,omitempty"`
	Plan      *PlanInfo  `json:"plan,omitempty"`
	Nodes     []NodeInfo `json:"nodes,omitempty"`
	SentBytes int64      `json:"sent_bytes,omitempty"` // of the stream, by the source
	Summary   *Report    `json:"summary,omitempty"`
}

// ImageInfo is the image of a cast.
type ImageInfo struct {
	Path        string `json:"path"`
	Bytes       int64  `json:"bytes"`        // raw
	StreamBytes int64  `json:"stream_bytes"` // as stored
	Encoding    string `json:"encoding"`
	Listen      string `json:"listen"` // the control address
	Nodes       int    `json:"nodes"`  // how many the server waits for (0: until told)
}

// PlanInfo is the plan a cast runs, and what the model said of the others.
type PlanInfo struct {
	Plan        string  `json:"plan"` // e.g. "chain, zstd"
	Topology    string  `json:"topology"`
	Fanout      int     `json:"fanout,omitempty"`
	Compression string  `json:"compression"`
	Predicted   float64 `json:"predicted_bytes_per_sec,omitempty"`
	Bottleneck  string  `json:"bottleneck,omitempty"`
	// Preview is every plan the model rated, best first; Chosen is the
	// index of the one that runs (-1: none of them, the model could not
	// judge).
	Preview []capacity.Row `json:"preview,omitempty"`
	Chosen  int            `json:"chosen"`
	Notes   []string       `json:"notes,omitempty"`
	Nodes   []NodeInfo     `json:"nodes"` // each with its upstream and target
}

// NodeInfo is a node as the cast stands.
type NodeInfo struct {
	Name     string `json:"name"`
	Target   string `json:"target,omitempty"`
	Upstream string `json:"upstream,omitempty"` // who sends it the stream ("" when out of the tree)
	Apart    bool   `json:"apart,omitempty"`    // served apart, at its own pace
	Status   string `json:"status"`
	// Written is how much of the image the node has on its target.
	Written   int64   `json:"written"`
	Rate      float64 `json:"rate_bytes_per_sec"`
	Predicted float64 `json:"predicted_bytes_per_sec,omitempty"`
	Seconds   float64 `json:"seconds"`
	Reason    string  `json:"reason,omitempty"`
	Verified  bool    `json:"verified,omitempty"`
}

// emit tells Config.Events of e, stamped now.
func (s *Server) emit(e Event) {
	if s.cfg.Events == nil {
		return
	}
	e.Time = time.Now()
	s.cfg.Events(e)
}

// say prints a line of the cast to the admin's view and tells Config.Events
// of it as an event of type t about node.
func (s *Server) say(t EventType, node string, format string, a ...any) {
	text := fmt.Sprintf(format, a...)
	fmt.Fprintf(s.cfg.Out, "  %s\n", text)
	s.emit(Event{Type: t, Node: node, Text: text})
}

// planInfo describes the plan p that runs, as chosen in ch.
func (s *Server) planInfo(p castPlan, ch Choice) *PlanInfo {
	r := ch.Result
	info := &PlanInfo{Plan: describeChoice(ch), Topology: string(r.Plan.Tree.Kind), Fanout: r.Plan.Tree.Fanout,
		Compression: "none", Chosen: -1, Notes: ch.Notes}
	if r.Plan.Tree.Kind == capacity.KindExplicit {
		info.Topology = string(capacity.KindTree)
	}
	if p.send.Compressed() {
		info.Compression = p.send.String()
	}
	if ch.Modeled {
		info.Predicted, info.Bottleneck = r.Rate, r.Bottleneck
		info.Preview = capacity.Preview(ch.Ranked)
		for i, rr := range ch.Ranked {
			if sameShape(rr.Plan, r.Plan) {
				info.Chosen = i
				break
			}
		}
	}
	node := func(n *nodeState, up string, apart bool, predicted float64) NodeInfo {
		return NodeInfo{Name: n.name, Target: n.target, Upstream: up, Apart: apart, Status: n.status.String(), Predicted: predicted}
	}
	for v := 1; v <= len(p.nodes); v++ {
		info.Nodes = append(info.Nodes, node(p.nodes[v-1], p.name(p.tree.Parent[v]), false, info.Predicted))
	}
	for _, a := range p.apart {
		up := SourceName
		switch {
		case a.up >= 0:
			up = p.name(a.up)
		case a.from != nil:
			up = a.from.name
		}
		info.Nodes = append(info.Nodes, node(a.node, up, true, a.rate))
	}
	return info
}

// nodeInfos is every node of the cast as it stands, with its upstream in
// the tree the cast runs on now.
func (s *Server) nodeInfos() []NodeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]NodeInfo, 0, len(s.castNodes))
	for _, n := range s.castNodes {
		info := NodeInfo{Name: n.name, Target: n.target, Status: n.status.String(), Written: n.progress.Written,
			Rate: n.rate, Reason: n.reason, Verified: n.verdict == verified}
		if up := s.tree.upstream(n); up != nil {
			info.Upstream, info.Apart = up.name(), s.tree.paced(n)
		}
		if !n.start.IsZero() {
			end := now
			if !n.end.IsZero() {
				end = n.end
			}
			info.Seconds = end.Sub(n.start).Seconds()
		}
		out = append(out, info)
	}
	return out
}

// eventEvery is the interval of progress events: often enough for a page
// to move smoothly, seldom enough that 1,000 nodes cost little.
const eventEvery = time.Second

// emitProgress tells Config.Events where every node of the cast stands.
func (s *Server) emitProgress(sent int64) {
	if s.cfg.Events == nil {
		return
	}
	s.emit(Event{Type: EvProgress, Nodes: s.nodeInfos(), SentBytes: sent})
}
