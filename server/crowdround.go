package server

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"dolly/dolly/control"
)

// One round of crowd probes: every node of the machines asked gets its
// order at once, and the answers come back by machine.

// crowdAnswers are the answers of one round of crowd probes.
type crowdAnswers struct {
	results map[string][]control.NetResult // by machine, good ones
	failed  map[string]string              // by machine, an error
}

// missing says, for a note, why not all nodes of machine m answered well;
// "" if they did. A node that did not took its share with it: the sum
// would then understate the machine.
func (a crowdAnswers) missing(m string, nodes []*nodeState) string {
	if got := len(a.results[m]); got < len(nodes) {
		return fmt.Sprintf("%d of the %s on one machine measured together (%s): the model counts what one measured alone", got, plural(len(nodes), "node"), cmp.Or(a.failed[m], "no answer in time"))
	}
	return ""
}

// going returns the machines all of whose nodes set their path up, and
// notes (with prefix) why the others are left out.
func (a crowdAnswers) going(machines map[string][]*nodeState, prefix string, notes *[]string) map[string][]*nodeState {
	going := map[string][]*nodeState{}
	for m, nodes := range machines {
		if why := a.missing(m, nodes); why != "" {
			*notes = append(*notes, prefix+why)
			continue
		}
		going[m] = nodes
	}
	return going
}

// crowdAsk is one kind of crowd probe in a round: the machines whose nodes
// take part, and each node's order.
type crowdAsk struct {
	machines map[string][]*nodeState
	order    func(*nodeState) control.CrowdProbe
}

// crowdRound sends every node of every ask its order, all at once, and
// collects the answers, one crowdAnswers for each ask.
func (s *Server) crowdRound(ctx context.Context, asks ...crowdAsk) []crowdAnswers {
	w, release := s.awaitNetResults()
	defer release()
	type asked struct {
		ask     int
		machine string
	}
	by := map[uint64]asked{}
	var all []uint64
	for i, a := range asks {
		for m, nodes := range a.machines {
			for _, n := range nodes {
				o := a.order(n)
				if n.conn.Send(control.Message{Type: control.MsgCrowdProbe, CrowdProbe: &o}) == nil {
					by[o.ID] = asked{i, m}
					all = append(all, o.ID)
				}
			}
		}
	}
	answers := make([]crowdAnswers, len(asks))
	for i := range answers {
		answers[i] = crowdAnswers{results: map[string][]control.NetResult{}, failed: map[string]string{}}
	}
	if len(all) == 0 {
		return answers
	}
	for id, r := range w.wait(ctx, all, time.Now().Add(crowdWait)) {
		a, m := &answers[by[id].ask], by[id].machine
		if r.Error != "" {
			a.failed[m] = r.Error
			continue
		}
		a.results[m] = append(a.results[m], r)
	}
	return answers
}
