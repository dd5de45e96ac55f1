package server

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/dolly/relay"
	"dolly/imaging"
)

// The nodes of a machine that holds more of the cast's hosts than it has
// cores, the source's machine counting the source, are told to keep to
// one core; no other node is told anything.
func TestShareCores(t *testing.T) {
	conn := controlPairs(t)
	probed := func(cores int) *capacity.Probe {
		return &capacity.Probe{Cores: cores, RelayBytesPerSec: 2e9, NetStreamBytesPerSec: 3e9, MemcpyBytesPerSec: 8e9}
	}
	const here = "the source's machine" // stands for its key (sourceMachine)
	for _, tt := range []struct {
		name     string
		machines []string // each node's
		cores    map[string]int
		want     []int // the procs each node is told; 0: told nothing
		wantHere bool  // the source's machine is crowded
	}{
		{"three nodes on two cores", []string{"m1", "m1", "m1"}, map[string]int{"m1": 2}, []int{1, 1, 1}, false},
		{"three nodes on eight cores", []string{"m1", "m1", "m1"}, map[string]int{"m1": 8}, []int{0, 0, 0}, false},
		{"three nodes and the source on three cores", []string{here, here, here}, map[string]int{here: 3}, []int{1, 1, 1}, true},
		{"three nodes and the source on four cores", []string{here, here, here}, map[string]int{here: 4}, []int{0, 0, 0}, false},
		{"three nodes on three cores", []string{"m1", "m1", "m1"}, map[string]int{"m1": 3}, []int{0, 0, 0}, false},
		{"one crowded machine, one not", []string{"m1", "m2", "m1", "m2", "m1"}, map[string]int{"m1": 2, "m2": 4}, []int{1, 0, 1, 0, 1}, false},
		{"one node alone", []string{"m1"}, map[string]int{"m1": 1}, []int{0}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			var ready []*nodeState
			var nodeEnds []*control.Conn
			probes := map[string]bool{}
			for _, m := range tt.machines {
				srv, node := conn()
				n := &nodeState{conn: srv, machine: m}
				if !probes[m] { // the first node of a machine measures it
					probes[m] = true
					n.probe = probed(tt.cores[m])
				}
				ready = append(ready, n)
				nodeEnds = append(nodeEnds, node)
			}
			for _, n := range ready {
				if n.machine == here {
					n.machine = s.sourceMachine(ready)
				}
			}
			s.shareCores(ready)
			if s.crowdedHere != tt.wantHere {
				t.Errorf("the source's machine crowded: %v, want %v", s.crowdedHere, tt.wantHere)
			}
			for i, n := range ready {
				// A ping after it tells "told nothing" from "not yet".
				n.conn.Send(control.Message{Type: control.MsgPing})
				m, err := nodeEnds[i].Recv(5 * time.Second)
				if err != nil {
					t.Fatal(err)
				}
				got := 0
				if m.Type == control.MsgShare {
					got = m.Share.Procs
				}
				if got != tt.want[i] {
					t.Errorf("node %d on %s: told %d procs (%s message), want %d", i, tt.machines[i], got, m.Type, tt.want[i])
				}
			}
		})
	}
}

// A cast whose stream is compressed gives the nodes of a crowded machine
// two threads (at most their cores) before their places; a raw one leaves
// them on one, and nodes that were never kept to one hear nothing.
func TestShareForCast(t *testing.T) {
	conn := controlPairs(t)
	for _, tt := range []struct {
		name  string
		send  imaging.Encoding
		cores int
		nodes int
		wake  time.Duration
		want  int // the procs each node was told last; 0: nothing
		// wantWake is the wake-up delay each node was told last, in ms
		wantWake int
	}{
		{"zstd, three nodes on two cores", imaging.Zstd, 2, 3, 0, 2, 0},
		{"gzip, three nodes on two cores", imaging.Gzip, 2, 3, 0, 2, 0},
		{"raw, three nodes on two cores", imaging.Raw, 2, 3, 0, 1, 0},
		{"zstd, two nodes on one core", imaging.Zstd, 1, 2, 0, 1, 0},
		{"zstd, three nodes on eight cores", imaging.Zstd, 8, 3, 0, 0, 0},
		{"zstd held back by the cores", imaging.Zstd, 2, 3, relay.CrowdedWakeDelay, 2, 12},
		{"raw held back by the cores: one thread stays", imaging.Raw, 2, 3, relay.CrowdedWakeDelay, 1, 12},
		{"eight cores: nobody is told", imaging.Raw, 8, 3, relay.CrowdedWakeDelay, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			var ready []*nodeState
			var nodeEnds []*control.Conn
			for i := range tt.nodes {
				srv, node := conn()
				n := &nodeState{conn: srv, machine: "m1"}
				if i == 0 {
					n.probe = &capacity.Probe{Cores: tt.cores, RelayBytesPerSec: 2e9, NetStreamBytesPerSec: 3e9, MemcpyBytesPerSec: 8e9}
				}
				ready = append(ready, n)
				nodeEnds = append(nodeEnds, node)
			}
			s.shareCores(ready)
			s.shareForCast(tt.send, tt.wake)
			for i, n := range ready {
				n.conn.Send(control.Message{Type: control.MsgPing})
				var got []control.Share
				for {
					m, err := nodeEnds[i].Recv(5 * time.Second)
					if err != nil {
						t.Fatal(err)
					}
					if m.Type != control.MsgShare {
						break
					}
					got = append(got, *m.Share)
				}
				procs, wake := 0, 0
				for _, sh := range got {
					if sh.Procs > 0 {
						procs = sh.Procs
					}
					wake = sh.WakeMillis
				}
				if procs != tt.want || wake != tt.wantWake {
					t.Errorf("node %d: told %+v: %d procs and %d ms last, want %d and %d", i, got, procs, wake, tt.want, tt.wantWake)
				}
			}
		})
	}
}

// The source casts on one thread where its machine is crowded and it
// sends the image as stored; a source that converts the stream, or runs on
// a machine of its own, keeps its threads, and the cast's end puts back
// what was set.
func TestShareSourceCores(t *testing.T) {
	for _, tt := range []struct {
		name    string
		crowded bool
		stored  imaging.Encoding
		send    imaging.Encoding
		want    []int // the settings asked for, in order
	}{
		{"raw as stored, crowded", true, imaging.Raw, imaging.Raw, []int{1, 2}},
		{"zstd as stored, crowded", true, imaging.Zstd, imaging.Zstd, []int{1, 2}},
		{"raw compressed on the fly", true, imaging.Raw, imaging.Zstd, nil},
		{"zstd decoded to raw", true, imaging.Zstd, imaging.Raw, nil},
		{"a machine of its own", false, imaging.Raw, imaging.Raw, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			procs := 2
			var asked []int
			s := &Server{crowdedHere: tt.crowded, img: &imaging.Image{Encoding: tt.stored}, log: slog.New(slog.DiscardHandler),
				cfg: Config{SetProcs: func(n int) int {
					asked = append(asked, n)
					was := procs
					procs = n
					return was
				}}}
			restore := s.shareSourceCores(tt.send)
			if len(tt.want) > 0 && procs != 1 {
				t.Errorf("the source runs on %d threads during the cast, want 1", procs)
			}
			restore()
			if !slices.Equal(asked, tt.want) || procs != 2 {
				t.Errorf("settings asked for %v, ending at %d; want %v, ending at 2", asked, procs, tt.want)
			}
		})
	}
}
