package status

import (
	"github.com/prometheus/client_golang/prometheus"

	"dolly/server"
)

// collector turns the hub's state into Prometheus metrics when scraped:
// nothing is counted twice, and no metric outlives the state it reads.
type collector struct {
	hub *Hub

	image, sent, elapsed, predicted            *prometheus.Desc
	written, rate, nodePredicted, nodeState    *prometheus.Desc
	nodes, failures, replans, casts, castsOver *prometheus.Desc
}

func newCollector(h *Hub) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("dolly_"+name, help, labels, nil)
	}
	return &collector{
		hub:           h,
		image:         d("image_bytes", "Raw size of the image being cast, in bytes."),
		sent:          d("source_sent_bytes", "Bytes of the stream the source has sent in this cast."),
		elapsed:       d("cast_duration_seconds", "Time since the cast started; once it is over, how long it took."),
		predicted:     d("predicted_rate_bytes_per_second", "The capacity model's rate for the plan that runs, raw image bytes per second."),
		written:       d("node_written_bytes", "Bytes of the image a node has written to its target in this cast.", "node"),
		rate:          d("node_rate_bytes_per_second", "A node's measured rate, raw image bytes per second.", "node"),
		nodePredicted: d("node_predicted_rate_bytes_per_second", "The model's rate for a node, raw image bytes per second.", "node"),
		nodeState:     d("node_state", "1 for the state a node of the cast is in.", "node", "state"),
		nodes:         d("nodes", "Nodes of the cast by state (verified counts apart from done).", "state"),
		failures:      d("node_failures_total", "Nodes taken out of a cast or whose target did not verify, over every cast."),
		replans:       d("replans_total", "Checks of a running cast that re-planned it or kept its plan, over every cast."),
		casts:         d("casts_total", "Casts over, by outcome: verified (every target), failed, not_started.", "result"),
		castsOver:     d("cast_over", "1 once the current cast is over."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.image, c.sent, c.elapsed, c.predicted, c.written, c.rate, c.nodePredicted,
		c.nodeState, c.nodes, c.failures, c.replans, c.casts, c.castsOver} {
		ch <- d
	}
}

// nodeStates are the states node_state and nodes report, so that each
// node has a series for every one of them (0 or 1).
var nodeStates = []string{"casting", "done", "verified", "failed"}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.hub.State()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(c.failures, st.Counts[countFailures])
	counter(c.replans, st.Counts[countReplans])
	counter(c.casts, st.Counts[countVerified], "verified")
	counter(c.casts, st.Counts[countFailed], "failed")
	counter(c.casts, st.Counts[countNotRun], "not_started")
	over := 0.0
	if st.Phase == Over {
		over = 1
	}
	gauge(c.castsOver, over)
	if st.Image != nil {
		gauge(c.image, float64(st.Image.Bytes))
	}
	if st.Phase == Waiting {
		return
	}
	counter(c.sent, float64(st.Sent))
	switch {
	case st.Summary != nil && st.Summary.Started:
		gauge(c.elapsed, st.Summary.ElapsedSeconds)
	case !st.Started.IsZero():
		gauge(c.elapsed, sinceSeconds(st.Started))
	}
	if st.Plan != nil && st.Plan.Predicted > 0 {
		gauge(c.predicted, st.Plan.Predicted)
	}
	byState := map[string]float64{}
	for _, n := range st.Nodes {
		state := nodeState(n)
		byState[state]++
		counter(c.written, float64(n.Written), n.Name)
		gauge(c.rate, n.Rate, n.Name)
		if n.Predicted > 0 {
			gauge(c.nodePredicted, n.Predicted, n.Name)
		}
		for _, s := range nodeStates {
			v := 0.0
			if s == state {
				v = 1
			}
			gauge(c.nodeState, v, n.Name, s)
		}
	}
	for _, s := range nodeStates {
		gauge(c.nodes, byState[s], s)
	}
}

// nodeState is a node's state as the metrics and the page name it.
func nodeState(n server.NodeInfo) string {
	switch {
	case n.Verified:
		return "verified"
	case n.Status == "done" || n.Status == "failed":
		return n.Status
	}
	return "casting"
}
