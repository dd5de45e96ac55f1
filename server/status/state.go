// Package status shows a running dolly-server to those who watch it from
// elsewhere than its terminal: a live web page, Prometheus metrics, and the
// state behind both, built from the server's events.
package status

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"dolly/server"
)

// State is a cast as its watchers see it: what the page draws and the
// metrics count. Its JSON is what /state serves and the page receives.
type State struct {
	Phase   Phase              `json:"phase"`
	Image   *server.ImageInfo  `json:"image,omitempty"`
	Joined  []string           `json:"joined"` // nodes waiting for the cast, in the order they came
	Plan    *server.PlanInfo   `json:"plan,omitempty"`
	Nodes   []server.NodeInfo  `json:"nodes"`      // every node of the cast as it stands
	Sent    int64              `json:"sent_bytes"` // of the stream, by the source
	Started time.Time          `json:"started,omitzero"`
	Log     []LogLine          `json:"log"`     // what happened, newest last
	Summary *server.Report     `json:"summary"` // of this cast, once over
	Casts   []server.Report    `json:"casts"`   // the last casts' summaries, newest first
	Counts  map[string]float64 `json:"-"`       // totals over every cast, for /metrics
}

// Phase is where the server stands.
type Phase string

const (
	Waiting Phase = "waiting" // for nodes to join
	Casting Phase = "casting"
	Over    Phase = "over"
)

// Limits on what State keeps, so that a server up for months stays small.
const (
	maxLog   = 200
	maxCasts = 10
)

// Counts' keys.
const (
	countFailures = "failures"
	countReplans  = "replans"
	countVerified = "casts_verified"
	countFailed   = "casts_failed"
	countNotRun   = "casts_not_started"
)

func newState() State {
	return State{Phase: Waiting, Counts: map[string]float64{}}
}

// apply folds e into st.
func (st *State) apply(e server.Event) {
	switch e.Type {
	case server.EvListening:
		// A new cast: what the last one left is history.
		*st = State{Phase: Waiting, Image: e.Image, Casts: st.Casts, Counts: st.Counts}
	case server.EvJoined:
		if !slices.Contains(st.Joined, e.Node) {
			st.Joined = append(st.Joined, e.Node)
		}
	case server.EvLeft:
		if st.Phase == Waiting {
			st.Joined = slices.DeleteFunc(st.Joined, func(n string) bool { return n == e.Node })
		}
	case server.EvPlan:
		st.Plan = e.Plan
		st.Nodes = slices.Clone(e.Plan.Nodes)
	case server.EvStarted:
		st.Phase, st.Started = Casting, e.Time
	case server.EvProgress:
		// Progress says where each node stands; the plan said what the
		// model predicted of it.
		predicted := map[string]float64{}
		for _, n := range st.Nodes {
			predicted[n.Name] = n.Predicted
		}
		st.Nodes, st.Sent = slices.Clone(e.Nodes), e.SentBytes
		for i := range st.Nodes {
			if st.Nodes[i].Predicted == 0 {
				st.Nodes[i].Predicted = predicted[st.Nodes[i].Name]
			}
		}
	case server.EvFailed, server.EvRejected:
		st.Counts[countFailures]++
		st.setNode(e.Node, func(n *server.NodeInfo) { n.Status, n.Reason = "failed", e.Text })
	case server.EvVerified:
		st.setNode(e.Node, func(n *server.NodeInfo) { n.Verified = true })
	case server.EvReplanned:
		st.Counts[countReplans]++
	case server.EvSummary:
		st.Phase, st.Summary = Over, e.Summary
		st.Casts = append([]server.Report{*e.Summary}, st.Casts...)[:min(len(st.Casts)+1, maxCasts)]
		switch {
		case !e.Summary.Started:
			st.Counts[countNotRun]++
		case e.Summary.Verified == len(e.Summary.Nodes) && len(e.Summary.Nodes) > 0:
			st.Counts[countVerified]++
		default:
			st.Counts[countFailed]++
		}
	}
	text := e.Text
	switch e.Type {
	case server.EvPlan:
		text = "plan: " + e.Plan.Plan
	case server.EvStarted:
		text = "the cast started"
	case server.EvVerified:
		text = e.Node + ": target verified"
	case server.EvRejected:
		text = e.Node + ": " + e.Text
	case server.EvSummary:
		text = summaryLine(e)
	}
	if text != "" {
		st.Log = append(st.Log, LogLine{Time: e.Time, Type: e.Type, Node: e.Node, Text: text})
		if len(st.Log) > maxLog {
			st.Log = slices.Delete(st.Log, 0, len(st.Log)-maxLog)
		}
	}
}

// LogLine is one line of what happened.
type LogLine struct {
	Time time.Time        `json:"time"`
	Type server.EventType `json:"type"`
	Node string           `json:"node,omitempty"`
	Text string           `json:"text"`
}

// summaryLine says how a cast ended.
func summaryLine(e server.Event) string {
	r := e.Summary
	if !r.Started {
		if e.Text != "" {
			return "the cast did not start: " + e.Text
		}
		return "the cast did not start"
	}
	return fmt.Sprintf("the cast is over: %d of %d nodes verified in %.1fs", r.Verified, len(r.Nodes), r.ElapsedSeconds)
}

// setNode changes the node named name, if the cast has it.
func (st *State) setNode(name string, change func(*server.NodeInfo)) {
	for i := range st.Nodes {
		if st.Nodes[i].Name == name {
			change(&st.Nodes[i])
		}
	}
}

// clone is a copy of st that later events do not change, its lists empty
// rather than nil (JSON's [] rather than null).
func (st *State) clone() State {
	c := *st
	c.Joined = append([]string{}, st.Joined...)
	c.Nodes = append([]server.NodeInfo{}, st.Nodes...)
	c.Log = append([]LogLine{}, st.Log...)
	c.Casts = append([]server.Report{}, st.Casts...)
	c.Counts = maps.Clone(st.Counts)
	return c
}

func sinceSeconds(t time.Time) float64 { return time.Since(t).Seconds() }
