package status

import (
	"fmt"
	"testing"
	"time"

	"dolly/server"
)

func TestStateFoldsEvents(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	plan := &server.PlanInfo{Plan: "chain, raw", Nodes: []server.NodeInfo{
		{Name: "pc01", Upstream: "dolly-server", Status: "ready", Predicted: 12e6},
		{Name: "pc02", Upstream: "pc01", Status: "ready"},
	}}
	progress := []server.NodeInfo{
		{Name: "pc01", Upstream: "dolly-server", Status: "casting", Written: 100},
		{Name: "pc02", Upstream: "pc01", Status: "casting", Written: 50},
	}
	events := []server.Event{
		{Type: server.EvListening, Image: &server.ImageInfo{Path: "nt.img", Bytes: 200}},
		{Type: server.EvJoined, Node: "pc01", Text: "joined pc01"},
		{Type: server.EvJoined, Node: "pc03", Text: "joined pc03"},
		{Type: server.EvJoined, Node: "pc02", Text: "joined pc02"},
		{Type: server.EvLeft, Node: "pc03", Text: "left pc03"},
		{Type: server.EvPlan, Plan: plan},
		{Type: server.EvStarted},
		{Type: server.EvProgress, Nodes: progress, SentBytes: 120},
		{Type: server.EvFailed, Node: "pc02", Text: "pc02 is out of the cast: no word from it"},
		{Type: server.EvVerified, Node: "pc01"},
		{Type: server.EvSummary, Summary: &server.Report{Image: "nt.img", Started: true, Verified: 1,
			Nodes: []server.ReportNode{{Name: "pc01"}, {Name: "pc02"}}}},
	}
	st := newState()
	for i, e := range events {
		e.Time = at.Add(time.Duration(i) * time.Second)
		st.apply(e)
	}
	if st.Phase != Over || len(st.Casts) != 1 || st.Summary == nil {
		t.Fatalf("phase %q, %d casts, summary %v; want over, 1, set", st.Phase, len(st.Casts), st.Summary)
	}
	if fmt.Sprint(st.Joined) != "[pc01 pc02]" {
		t.Errorf("joined %v, want [pc01 pc02] (pc03 left)", st.Joined)
	}
	if st.Sent != 120 || st.Started != at.Add(6*time.Second) {
		t.Errorf("sent %d, started %v", st.Sent, st.Started)
	}
	want := map[string]string{"pc01": "casting verified=true", "pc02": "failed verified=false"}
	for _, n := range st.Nodes {
		if got := fmt.Sprintf("%s verified=%v", n.Status, n.Verified); got != want[n.Name] {
			t.Errorf("%s: %s, want %s", n.Name, got, want[n.Name])
		}
	}
	if st.Nodes[0].Predicted != 12e6 {
		t.Errorf("pc01's prediction %v after progress, want the plan's 12e6", st.Nodes[0].Predicted)
	}
	if st.Nodes[1].Reason != "pc02 is out of the cast: no word from it" {
		t.Errorf("pc02's reason %q", st.Nodes[1].Reason)
	}
	if st.Counts[countFailures] != 1 || st.Counts[countFailed] != 1 || st.Counts[countVerified] != 0 {
		t.Errorf("counts %v", st.Counts)
	}
	var lines []string
	for _, l := range st.Log {
		lines = append(lines, l.Text)
	}
	wantLog := "[joined pc01 joined pc03 joined pc02 left pc03 plan: chain, raw the cast started pc02 is out of the cast: no word from it pc01: target verified the cast is over: 1 of 2 nodes verified in 0.0s]"
	if got := fmt.Sprint(lines); got != wantLog {
		t.Errorf("log:\n%s\nwant:\n%s", got, wantLog)
	}

	// The next cast starts afresh but keeps the history and the totals.
	st.apply(server.Event{Type: server.EvListening, Image: &server.ImageInfo{Path: "other.img"}})
	if st.Phase != Waiting || len(st.Nodes) != 0 || len(st.Log) != 0 || len(st.Casts) != 1 || st.Counts[countFailures] != 1 {
		t.Errorf("after a new cast: phase %q, %d nodes, %d log lines, %d casts, counts %v", st.Phase, len(st.Nodes), len(st.Log), len(st.Casts), st.Counts)
	}
}

func TestStateStaysBounded(t *testing.T) {
	st := newState()
	for i := range maxLog + 50 {
		st.apply(server.Event{Type: server.EvJoined, Node: fmt.Sprint("pc", i), Text: fmt.Sprint("joined ", i)})
	}
	for range maxCasts + 5 {
		st.apply(server.Event{Type: server.EvSummary, Summary: &server.Report{}})
	}
	if len(st.Log) != maxLog || len(st.Casts) != maxCasts {
		t.Errorf("%d log lines and %d casts kept; want %d and %d", len(st.Log), len(st.Casts), maxLog, maxCasts)
	}
	if st.Counts[countNotRun] != maxCasts+5 {
		t.Errorf("%v casts that did not start counted, want %d", st.Counts[countNotRun], maxCasts+5)
	}
}
