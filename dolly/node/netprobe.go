package node

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/dial"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
)

// Bandwidth probes before the plan (see dolly/probe): the server tells a
// node to send to another, and the receiver reports what it counted.

const (
	// maxProbeTime bounds a probe the server asks for, whatever it asks.
	maxProbeTime = 10 * time.Second
	// probeReceiveLimit bounds how long a node counts one probe.
	probeReceiveLimit = 2 * maxProbeTime
)

// sendProbe sends probe p and tells the server if it could not.
func (n *node) sendProbe(ctx context.Context, p control.NetProbe) {
	d := min(time.Duration(p.Seconds*float64(time.Second)), maxProbeTime)
	if p.After != 0 {
		wait := time.NewTimer(min(time.Duration(p.AfterSeconds*float64(time.Second)), probeReceiveLimit))
		defer wait.Stop()
		select {
		case <-n.probed.done(p.After):
		case <-wait.C:
		case <-ctx.Done():
			return
		}
		n.probed.forget(p.After)
	}
	err := func() error {
		c, err := dial.Data(ctx, p.To, time.Now().Add(d+time.Second))
		if err != nil {
			return err
		}
		defer c.Close()
		if err := stream.OpenProbe(c, p.ID, n.frameKey, p.Token); err != nil {
			return err
		}
		_, err = probe.SendFor(ctx, c, d, p.Bytes)
		return err
	}()
	if err != nil {
		n.log.Warn("bandwidth probe not sent", "to", p.To, "err", err)
		n.ctl.send(control.Message{Type: control.MsgNetResult, NetResult: &control.NetResult{ID: p.ID, Error: err.Error()}})
	}
}

// receiveProbe counts probe id arriving on c and reports it.
func (n *node) receiveProbe(c net.Conn, id uint64) {
	defer c.Close()
	cpu, machine := probe.ProcessCPU(), probe.ReadCPUTimes()
	r := probe.Receive(c, time.Now().Add(probeReceiveLimit))
	n.probed.end(id)
	spent := probe.ReadCPUTimes().Sub(machine)
	res := control.NetResult{ID: id, Bytes: r.Bytes, Rate: r.Rate, CPU: (probe.ProcessCPU() - cpu).Seconds(),
		MachineCPU: spent.Busy.Seconds(), MachineIdle: spent.Idle.Seconds()}
	n.ctl.send(control.Message{Type: control.MsgNetResult, NetResult: &res})
}

// crowdProbe sets the node's data path up for crowd probe set (its write
// path to the target with set.Disk), says it is ready, and when told pushes
// through it, as the other nodes of its machine do at the same moment, and
// reports what passed in the window.
func (n *node) crowdProbe(ctx context.Context, set control.CrowdProbe, push <-chan control.CrowdProbe) {
	id := set.ID
	fail := func(err error) {
		n.log.Warn("crowd probe failed", "err", err)
		n.ctl.send(control.Message{Type: control.MsgNetResult, NetResult: &control.NetResult{ID: id, Error: err.Error()}})
	}
	var c crowdPath
	var err error
	var mem []byte
	release := func() {}
	if !set.Decode { // the decoders' crowd needs none of the history
		mem, release = n.lendHistory(set.Disk)
	}
	// done releases what the probe holds: c once it is set up, then mem,
	// which nothing of c touches by then.
	done := release
	defer func() { done() }()
	switch {
	case set.Disk && !n.welcome.MeasureTarget:
		// The node's own guard: nothing is written to the target before
		// the admin has confirmed the cast.
		err = errors.New("the target is not to be written before the cast is confirmed")
	case set.Disk:
		c, err = probe.StartDiskCrowd(n.target, n.cfg.Buffered, mem)
	case set.Decode:
		c, err = probe.StartDecodeCrowd()
	default:
		c, err = probe.StartCrowd(ctx, mem)
	}
	if err != nil {
		fail(err)
		return
	}
	done = func() { c.Close(); release() }
	n.ctl.send(control.Message{Type: control.MsgNetResult, NetResult: &control.NetResult{ID: id}})
	// A disk crowd's path stays set up for the server's next order under
	// the same id, until the join ends (push is closed) or no order came
	// for maxProbeTime: a disk measured again then costs the join one more
	// window, not the reading that sets it up too. A relay's is pushed
	// once.
	for {
		var order control.CrowdProbe
		var ok bool
		select {
		case order, ok = <-push:
			if !ok {
				return
			}
		case <-time.After(maxProbeTime):
			return // the server gave up on it
		case <-ctx.Done():
			return
		}
		settle := min(time.Duration(order.SettleMillis)*time.Millisecond, maxCrowdTime)
		window := min(max(time.Duration(order.WindowMillis)*time.Millisecond, time.Millisecond), maxCrowdTime)
		// A disk crowd's writes are all on the disk once PushFor returns: the
		// cast does not pay for them.
		bytes, took, err := c.PushFor(settle, window)
		if err != nil {
			fail(err)
			return
		}
		res := control.NetResult{ID: id, Bytes: bytes, Rate: float64(bytes) / took.Seconds()}
		switch c := c.(type) {
		case *probe.DiskCrowd:
			if w := c.Window(); w.BusyTo > w.BusyFrom {
				res.CPU = (w.BusyTo - w.BusyFrom).Seconds()
				res.WindowFrom, res.WindowTo = w.From.UnixNano(), w.To.UnixNano()
				res.BusyFrom, res.BusyTo = w.BusyFrom.Seconds(), w.BusyTo.Seconds()
			}
		case interface{ WindowCPU() time.Duration }:
			res.CPU = c.WindowCPU().Seconds()
		}
		if !set.Disk {
			// Spent: closed and its memory handed back before the result,
			// so that a crowd the server measures again at once (see
			// doubtedCrowds) borrows the same memory.
			done()
			done = func() {}
			n.ctl.send(control.Message{Type: control.MsgNetResult, NetResult: &res})
			return
		}
		n.ctl.send(control.Message{Type: control.MsgNetResult, NetResult: &res})
	}
}

// lendHistory lends a crowd probe part of the relay's history: mapped
// already, while fresh memory's first touches cost a VM's host dearly, and
// unused between the node's own probe (over before it is ready) and the
// cast, which starts only once every crowd probe of the join has ended
// (see join). A relay crowd gets the first
// probe.CrowdMemory bytes, a disk crowd the rest; a second probe of a kind
// at once gets nil, and memory of its own. release gives the part back.
func (n *node) lendHistory(disk bool) (mem []byte, release func()) {
	k := min(len(n.history), probe.CrowdMemory)
	i, part := 0, n.history[:k:k]
	if disk {
		i, part = 1, n.history[len(part):]
	}
	if !n.historyLent[i].CompareAndSwap(false, true) {
		return nil, func() {}
	}
	return part, func() { n.historyLent[i].Store(false) }
}

// crowdPath is a data path a crowd probe pushes through: the relay's
// (probe.Crowd), the target's (probe.DiskCrowd) or a decoder's
// (probe.DecodeCrowd).
type crowdPath interface {
	PushFor(settle, window time.Duration) (int64, time.Duration, error)
	Close()
}

// maxCrowdTime bounds each part of a crowd probe, whatever the order.
const maxCrowdTime = time.Second

// probesReceived tells when the bandwidth probes sent to this node have
// ended, so that a probe ordered to follow one (NetProbe.After) starts the
// moment it has. The zero value is ready to use.
type probesReceived struct {
	mu    sync.Mutex
	ended map[uint64]chan struct{}
}

// done returns a channel closed once probe id has ended here.
func (p *probesReceived) done(id uint64) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.get(id)
}

// end marks probe id ended.
func (p *probesReceived) end(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.get(id)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// forget drops what is known of probe id, once no order waits for it.
func (p *probesReceived) forget(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ended, id)
}

func (p *probesReceived) get(id uint64) chan struct{} {
	if p.ended == nil {
		p.ended = map[uint64]chan struct{}{}
	}
	ch, ok := p.ended[id]
	if !ok {
		ch = make(chan struct{})
		p.ended[id] = ch
	}
	return ch
}
