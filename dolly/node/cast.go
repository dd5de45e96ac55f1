package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/dolly/relay"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/imaging/blockmap"
)

// receipt is the receiver's outcome once it has the whole stream.
type receipt struct {
	digest imaging.Digest
	err    error
}

// cast runs the node's part of the cast: the relay, the receiver writing
// the target, and the control traffic, through lost servers and rewiring,
// until the server's verdict. The node leaves once its children have
// everything: with the server's verdict, or after its disk failed.
func (n *node) cast(ctx context.Context, a *control.Assign) (Result, error) {
	n.encoding = a.Encoding
	n.start = time.Now()
	n.initial = a.Children
	// The node serves children that come late (their upstream died) from
	// its history for as long as it is up.
	n.sums = stream.NewPayloadSums()
	r, err := relay.New(n.relayConfig())
	if err != nil {
		return Result{}, n.fail(err.Error())
	}
	n.relay = r
	if a.Yield {
		r.Yield(true)
		n.log.Info("served apart on a machine shared with the plan: writing as the history fills, until the plan is done")
	}
	n.ctl.resumable.Store(true)
	close(n.casting) // upstreams may come in
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()
	drained := make(chan struct{})
	go func() {
		if r.Drained(relayCtx) == nil {
			close(drained)
		}
	}()
	received := make(chan receipt, 1)
	stopProgress := n.reportProgress()
	defer stopProgress()
	n.log.Info("casting", "upstream", a.Upstream, "children", len(a.Children), "zero_copy", r.ZeroCopy())
	n.cpuAtStart = probe.ProcessCPU()

	var verdict *control.Result
	var diskErr error
	relayEnded := false
	for !relayEnded || verdict == nil && diskErr == nil {
		select {
		case h := <-n.firstHeader:
			go n.receive(h, received)
		case ev := <-n.ctl.events:
			v, err := n.onControl(ctx, ev)
			if err != nil {
				return n.result(), err
			}
			verdict = cmp.Or(v, verdict)
		case ev := <-r.Events():
			n.onRelayEvent(ev)
		case rc := <-received:
			n.out.set(rc.digest)
			if diskErr = rc.err; diskErr != nil {
				n.fail(diskErr.Error())
			} else {
				n.reportDone()
			}
		case <-drained:
			relayEnded, drained = true, nil
		case err := <-relayDone:
			if ctx.Err() == nil {
				return n.result(), n.fail(fmt.Sprintf("relay: %v", err))
			}
		case <-ctx.Done():
			return n.result(), ctx.Err()
		}
	}
	// The data path's own cost, without joining and probing: what a
	// relay costs per byte.
	n.log.Info("stream done", "cpu", (probe.ProcessCPU() - n.cpuAtStart).Round(time.Millisecond))
	res := n.result()
	if diskErr != nil {
		return res, diskErr
	}
	res.After = verdict.After
	if !verdict.OK {
		return res, fmt.Errorf("server did not verify this node: %s", verdict.Message)
	}
	return res, nil
}

// relayConfig is the cast's relay: zero-copy unless told otherwise, serving
// children that come late from its history, waking as the server said.
func (n *node) relayConfig() relay.Config {
	return relay.Config{NoSplice: n.cfg.NoSplice, ServeLate: true, SpoolDir: n.cfg.SpoolDir, History: n.history,
		WakeDelay: time.Duration(n.wake.Load()), Observe: n.sums.Observe}
}

// maxWake bounds the wake-up delay a server may ask for: every hop of a
// chain holds the stream that long.
const maxWake = 50 * time.Millisecond

// onControl acts on what the session reports during the cast and returns
// the server's verdict once it comes. An abort, or a server lost for good,
// is an error.
func (n *node) onControl(ctx context.Context, ev sessionEvent) (*control.Result, error) {
	switch {
	case ev.err != nil:
		return nil, ev.err
	case ev.back:
		if done, _ := n.out.get(); done {
			n.reportDone()
		}
		return nil, nil
	}
	switch m := ev.msg; m.Type {
	case control.MsgAbort:
		return nil, fmt.Errorf("server aborted the cast: %s", m.Reason)
	case control.MsgAttach:
		go n.attach(ctx, *m.Peer)
	case control.MsgDetach:
		n.relay.Detach(ctx, m.Peer.Name)
	case control.MsgAssign:
		// A restarted server places the node anew, and says whether it
		// still yields.
		n.relay.Yield(m.Assign.Yield)
		for _, name := range n.relay.ChildNames(ctx) {
			n.relay.Detach(ctx, name)
		}
		for _, p := range m.Assign.Children {
			go n.attach(ctx, p)
		}
	case control.MsgCatchUp:
		n.relay.Yield(false)
		n.log.Info("the plan is done: catching up")
	case control.MsgResult:
		return m.Result, nil
	}
	return nil, nil
}

func (n *node) onRelayEvent(ev relay.Event) {
	switch ev.Kind {
	case relay.ChildLost:
		n.log.Warn("lost a child", "child", ev.Name, "err", ev.Err)
		reason := ""
		if ev.Err != nil {
			reason = ev.Err.Error()
		}
		n.ctl.send(control.Message{Type: control.MsgChildLost, Peer: &control.Peer{Name: ev.Name}, Reason: reason})
	case relay.UpstreamLost:
		n.log.Warn("lost the upstream; waiting for a new one", "pos", ev.Pos, "err", ev.Err)
	}
}

// receive writes the stream to the target and reports the outcome.
func (n *node) receive(h stream.StreamHeader, received chan<- receipt) {
	size := h.ImageSize
	if n.welcome.Disk != nil && n.targetSize > 0 {
		size = min(size, n.targetSize) // checked at join: every partition fits
	}
	tg, err := imaging.OpenTarget(n.target, size, imaging.TargetOptions{Direct: !n.cfg.Buffered, Shared: n.cfg.Force})
	if err != nil {
		n.relay.DropLocalCopy()
		received <- receipt{err: err}
		return
	}
	n.mu.Lock()
	n.tg = tg
	n.mu.Unlock()
	hooks := stream.Hooks{
		Sums:    n.sums,
		EndSeen: n.relay.EndSeen,
		TargetFailed: func(err error) {
			n.log.Error("target failed; relaying on for the nodes downstream", "err", err)
			n.ctl.send(control.Message{Type: control.MsgFail, Reason: err.Error()})
		},
	}
	var w imaging.BlockWriter = tg
	if size < h.ImageSize {
		w = imaging.Clip(tg, size)
	}
	if n.used != nil {
		var parts []blockmap.Extent
		if d := n.welcome.Disk; d != nil {
			for _, p := range d.Parts {
				parts = append(parts, blockmap.Extent{Off: p[0], Len: p[1]})
			}
		}
		w = imaging.SkipFree(w, *n.used, parts...)
	}
	d, _, err := stream.Receive(n.relay.Reader(), h, n.frameKey, w, &n.counters, hooks)
	if errors.Is(err, castkey.ErrAuth) {
		// Frames that do not verify (forged by an upstream, or altered on
		// the way) never reach the target; say so at once, not when the
		// stream would have ended.
		n.log.Error("the stream does not verify; nothing more is written", "err", err)
		n.ctl.send(control.Message{Type: control.MsgFail, Reason: err.Error()})
	}
	if err == nil {
		t := time.Now()
		err = tg.Sync()
		n.log.Info("target flushed", "took", time.Since(t).Round(time.Millisecond))
	}
	if discarded, left := tg.Freed(); discarded+left > 0 {
		n.log.Info("free blocks not written", "discarded", discarded, "left", left)
	}
	if err == nil && n.welcome.Disk != nil {
		err = n.fitDisk(tg, h.ImageSize)
	}
	received <- receipt{digest: d, err: err}
}

func (n *node) reportDone() {
	_, d := n.out.get()
	done := control.Done{Digest: d.String(), Written: n.counters.Written.Load(), Seconds: time.Since(n.start).Seconds(), Pos: n.relay.Pos(),
		CPU: (probe.ProcessCPU() - n.cpuAtStart).Seconds()}
	n.ctl.send(control.Message{Type: control.MsgDone, Done: &done})
}

// reportProgress sends progress until the returned stop is called; the
// server also takes it as a sign of life.
func (n *node) reportProgress() (stop func()) {
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(n.cfg.ProgressEvery)
		defer t.Stop()
		held, starved, last := n.relay.Held(), n.relay.Starved(), time.Now()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			p := control.Progress{Stream: n.counters.Stream.Load(), Written: n.counters.Written.Load(), Pos: n.relay.Pos()}
			now, nowStarved, span := n.relay.Held(), n.relay.Starved(), time.Since(last)
			p.HeldBy = relay.MostHeld(held, now, span/2)
			if span > 0 {
				p.Starved = min(max(float64(nowStarved-starved)/float64(span), 0), 1)
			}
			held, starved, last = now, nowStarved, time.Now()
			n.ctl.send(control.Message{Type: control.MsgProgress, Progress: &p})
		}
	}()
	return func() { close(quit); <-stopped }
}
