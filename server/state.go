package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/internal/natural"
)

// status is where a node stands in the cast.
type status int

const (
	stJoined  status = iota // said hello, target not yet checked
	stReady                 // target checked, waiting for the cast
	stRefused               // target refused before the cast; nothing written
	stCasting               // receiving and writing
	stDone                  // reported its digest; verdict sent
	stFailed                // failed during the cast
)

func (s status) String() string {
	return [...]string{"joined", "ready", "refused", "casting", "done", "failed"}[s]
}

// nodeState is the server's view of one node. Where it stands in the tree
// the cast runs on is the castTree's to say. Fields are guarded by the
// Server's mutex.
type nodeState struct {
	// castCPU is the CPU time the node's process reported its part of the
	// cast cost, once done; 0 until then.
	castCPU    time.Duration
	name       string
	from       string // remote address of the control connection
	dataAddr   string
	target     string
	targetSize int64
	block      bool
	cachedBy   string          // the file behind a loop device without direct I/O
	probe      *capacity.Probe // what the node measured, if it did
	machine    string          // tells nodes on one machine apart from the rest
	macs       []string        // its NICs' MAC addresses, as its hello listed them
	probes     bool            // it measures its machine for the others on it
	token      []byte          // its data token from its latest welcome (unkeyed casts)
	probeToken []byte          // and its probe token
	conn       *control.Conn

	status status
	reason string // why refused or failed

	progress   control.Progress
	progressAt time.Time
	rate       float64 // smoothed raw bytes/s
	start, end time.Time
	digest     string
	pos        int64 // stream bytes it has received
	resumed    bool  // it came with a cast already under way
	welcomed   bool  // its control connection has had its welcome (keepAlive)
	// late says it joined after the plan was made: it is served apart,
	// once the source's link is free; waiting says its stream has not
	// started yet.
	late, waiting bool
	// heldBy names the child its relay has waited for most of the time,
	// in its reports since heldSince.
	heldBy    string
	heldSince time.Time
	// starved is the share of the time its relay waited for its
	// upstream's data, in its last report.
	starved   float64
	lastHeard time.Time // any message from it
	lastMoved time.Time // pos last grew

	// verdict is what its digest proved, once it reported one; told says
	// the verdict was sent on its present connection (a node that comes
	// back is told again). Only a verified node ever has left set: its
	// control connection ended while it was in the tree, and it serves no
	// one any more (see gone).
	verdict verdict
	told    bool
	left    bool
}

// verdict is what the comparison of a node's digest with the source's
// found.
type verdict int

const (
	noVerdict verdict = iota // no digest compared yet
	verified                 // its digest is the source's: its target holds the image
	rejected                 // its digest differs: it failed
)

// finished reports whether the node needs nothing more in this cast.
func (n *nodeState) finished() bool {
	return n.status == stDone || n.status == stFailed || n.status == stRefused
}

// gone reports whether the node ended its part after its verdict: it
// closed its control connection, or has been silent past timeout (a node
// still in its cast reports progress). It serves no one any more.
func (n *nodeState) gone(now time.Time, timeout time.Duration) bool {
	return n.verdict == verified && (n.left || now.Sub(n.lastHeard) > timeout)
}

// observe folds a progress report into the node's rate and position.
func (n *nodeState) observe(p control.Progress, now time.Time) {
	if p.Pos > n.pos {
		n.pos, n.lastMoved = p.Pos, now
	}
	if !n.progressAt.IsZero() {
		if dt := now.Sub(n.progressAt).Seconds(); dt > 0 {
			inst := float64(p.Written-n.progress.Written) / dt
			if n.rate == 0 {
				n.rate = inst
			} else {
				n.rate = 0.7*n.rate + 0.3*inst
			}
		}
	}
	n.progress, n.progressAt = p, now
}

func sortNodes(ns []*nodeState) {
	slices.SortStableFunc(ns, func(a, b *nodeState) int { return natural.Compare(a.name, b.name) })
}

// formatDuration renders a duration for people: 45s, 3m07s, 1h02m.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int(d.Round(time.Second).Seconds())
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

// mbps renders bytes/s as MB/s (10^6).
func mbps(bytesPerSec float64) string {
	return strconv.FormatFloat(bytesPerSec/1e6, 'f', 1, 64)
}

func joinNames(ns []*nodeState, limit int) string {
	var names []string
	for i, n := range ns {
		if i == limit {
			names = append(names, fmt.Sprintf("… (%d more)", len(ns)-limit))
			break
		}
		names = append(names, n.name)
	}
	return strings.Join(names, ", ")
}

// listNames shortens a long list of names for a one-line note.
func listNames(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
}

// plural renders "1 machine", "3 machines".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
