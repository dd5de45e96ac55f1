package server

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Report is the machine-readable record of a cast (dolly-server -report).
type Report struct {
	Image          string     `json:"image"`
	ImageBytes     int64      `json:"image_bytes"`
	Digest         string     `json:"digest"`
	Plan           ReportPlan `json:"plan"`
	Started        bool       `json:"started"` // false: the cast never began, nothing was written
	ElapsedSeconds float64    `json:"elapsed_seconds"`
	JoinSeconds    float64    `json:"join_seconds,omitempty"` // from the last node joining to the plan
	// JoinParts is where the join went, in seconds: "probes", "network"
	// and "shared" (see JoinParts).
	JoinParts    map[string]float64 `json:"join_parts,omitempty"`
	Verified     int                `json:"verified"`
	StreamBytes  int64              `json:"stream_bytes"`            // the stream as encoded
	ResumedBytes int64              `json:"resumed_bytes,omitempty"` // of which the nodes had already (not sent)
	Nodes        []ReportNode       `json:"nodes"`
	// Replans are the checks of a cast that ran below its prediction; the
	// plan above is the one it started with.
	Replans []ReportReplan `json:"replans,omitempty"`
	// ThisMachine is how the CPUs of dolly-server's machine spent the
	// cast, when nodes ran on it too (see MachineUse).
	ThisMachine *ReportMachine `json:"this_machine,omitempty"`
}

// ReportMachine is how a machine's CPUs spent the cast, as shares of their
// time: Busy, Steal (taken by a VM's host) and Idle (or waiting for a
// disk); Processes is the part of Busy the cast's own processes reported
// (0: not all of them did).
type ReportMachine struct {
	Hosts     int     `json:"hosts"`
	Cores     int     `json:"cores"`
	Busy      float64 `json:"busy"`
	Processes float64 `json:"processes,omitempty"`
	Steal     float64 `json:"steal"`
	Idle      float64 `json:"idle"`
	// BusyCPUSeconds is the machine's busy time over the cast,
	// ProcessCPUSeconds the cast's processes' part of it, ModelCPUSeconds
	// what the model counted for the cast there; 0 when unknown.
	BusyCPUSeconds    float64 `json:"busy_cpu_seconds"`
	ProcessCPUSeconds float64 `json:"process_cpu_seconds,omitempty"`
	ModelCPUSeconds   float64 `json:"model_cpu_seconds,omitempty"`
}

// ReportReplan is one check of a running cast.
type ReportReplan struct {
	AtSeconds     float64 `json:"at_seconds"`
	From          string  `json:"from"`
	To            string  `json:"to"` // the same as from if the plan stayed
	MeasuredMBps  float64 `json:"measured_mbps"`
	PredictedMBps float64 `json:"predicted_mbps"` // of the plan from then on
}

// ReportPlan is the plan that ran and the model's prediction for it.
type ReportPlan struct {
	Topology      string  `json:"topology"` // chain, tree or star
	Fanout        int     `json:"fanout"`
	Compression   string  `json:"compression"` // what travelled: none, zstd or gzip
	Nodes         int     `json:"nodes"`
	Modeled       bool    `json:"modeled"`
	PredictedMBps float64 `json:"predicted_mbps,omitempty"` // the plan's steady rate
	// SlowestPredictedMBps is the image over the ETA, start-up and the
	// hops' lag included: what MeasuredMBps is held against.
	SlowestPredictedMBps float64 `json:"slowest_predicted_mbps,omitempty"`
	// MeasuredMBps is the image over the time the slowest verified node
	// took.
	MeasuredMBps float64 `json:"measured_mbps,omitempty"`
	ETASeconds   float64 `json:"eta_seconds,omitempty"`
	Bottleneck   string  `json:"bottleneck,omitempty"`
}

// ReportNode is one node's outcome.
type ReportNode struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Status   string  `json:"status"`
	Reason   string  `json:"reason,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"` // from its assignment to its verdict
	MBps     float64 `json:"mbps,omitempty"`    // image bytes over those seconds
	Verified bool    `json:"verified"`
	// PredictedMBps is the model's rate for this node; ApartFrom names the
	// node that served it at its own pace, when the plan served it apart.
	PredictedMBps float64 `json:"predicted_mbps,omitempty"`
	ApartFrom     string  `json:"apart_from,omitempty"`
	Late          bool    `json:"late,omitempty"` // joined after the plan was made
}

// NewReport turns a summary into a report.
func NewReport(sum Summary) Report {
	r := Report{
		Image:          sum.Image,
		ImageBytes:     sum.Size,
		Started:        sum.Started,
		ElapsedSeconds: sum.Elapsed.Seconds(),
		JoinSeconds:    sum.JoinPhase.Seconds(),
		JoinParts:      sum.JoinParts.seconds(),
		Verified:       sum.Verified,
		StreamBytes:    sum.StreamBytes,
		ResumedBytes:   sum.ResumedBytes,
	}
	if !sum.Digest.IsZero() {
		r.Digest = sum.Digest.String()
	}
	if m := sum.ThisMachine; m != nil && m.CPU.Total() > 0 {
		sh := m.shares()
		r.ThisMachine = &ReportMachine{Hosts: m.Hosts, Cores: m.Cores, Busy: sh.busy, Processes: sh.own, Steal: sh.steal, Idle: sh.idle,
			BusyCPUSeconds: m.CPU.Busy.Seconds(), ProcessCPUSeconds: m.Processes.Seconds(), ModelCPUSeconds: m.Modeled.Seconds()}
	}
	if p := sum.Plan.Result.Plan; p.Hosts != nil {
		r.Plan = ReportPlan{
			Topology:    string(p.Tree.Kind),
			Fanout:      p.Tree.Fanout,
			Compression: "none",
			Nodes:       p.Tree.Nodes(),
			Modeled:     sum.Plan.Modeled,
		}
		if p.Tree.Kind == "explicit" {
			r.Plan.Topology = "tree"
		}
		if sum.Plan.Send.Compressed() {
			r.Plan.Compression = sum.Plan.Send.String()
		}
		if sum.Plan.Modeled {
			r.Plan.PredictedMBps = sum.Plan.Result.Rate / 1e6
			r.Plan.ETASeconds = sum.Plan.Result.ETA.Seconds()
			r.Plan.SlowestPredictedMBps = sum.PredictedRate() / 1e6
			r.Plan.Bottleneck = sum.Plan.Result.Bottleneck
		}
		r.Plan.MeasuredMBps = sum.MeasuredRate() / 1e6
	}
	for _, rp := range sum.Replans {
		r.Replans = append(r.Replans, ReportReplan{AtSeconds: rp.At.Seconds(), From: rp.From, To: rp.To,
			MeasuredMBps: rp.Measured / 1e6, PredictedMBps: rp.Predicted / 1e6})
	}
	for _, n := range sum.Nodes {
		rn := ReportNode{Name: n.Name, Target: n.Target, Status: n.Status, Reason: n.Reason, Verified: n.Verified, ApartFrom: n.Apart, Late: n.Late}
		if n.Predicted > 0 && n.Predicted < 1e15 {
			rn.PredictedMBps = n.Predicted / 1e6
		}
		if n.Elapsed > 0 {
			rn.Seconds = n.Elapsed.Seconds()
			rn.MBps = float64(sum.Size) / n.Elapsed.Seconds() / 1e6
		}
		r.Nodes = append(r.Nodes, rn)
	}
	return r
}

// WriteReport writes the report of a cast as JSON to path.
func WriteReport(path string, sum Summary) error {
	b, err := json.MarshalIndent(NewReport(sum), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// seconds is the report's form of the parts: those that took any time.
func (p JoinParts) seconds() map[string]float64 {
	m := map[string]float64{}
	for name, d := range map[string]time.Duration{"probes": p.Probes, "network": p.Network, "shared": p.Shared} {
		if d > 0 {
			m[name] = d.Seconds()
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
