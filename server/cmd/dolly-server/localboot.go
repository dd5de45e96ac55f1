package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// diskBoots remembers the netbooted PCs this cast verified: when they
// netboot again (-after reboot, or reset by hand), the netboot service
// sends them to their own disks rather than into the node, so that PCs may
// keep the network first in their boot order. Once the cast is over, so
// is every PC that netboots: no cast waits for it.
type diskBoots struct {
	mu       sync.Mutex
	verified map[string]string // node name by MAC
	sent     map[string]bool   // nodes sent to their disks
	over     bool              // the cast is over
	changed  chan struct{}
}

func newDiskBoots() *diskBoots {
	return &diskBoots{verified: map[string]string{}, sent: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// add records a verified node's MAC addresses.
func (d *diskBoots) add(node string, macs []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range macs {
		d.verified[strings.ToLower(m)] = node
	}
}

// why says why the PC with this MAC boots its disk, "" if it does not.
func (d *diskBoots) why(mac string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	node, ok := d.verified[mac]
	switch {
	case ok:
		return node + " is verified in this cast"
	case d.over:
		return "no cast is running"
	}
	return ""
}

// castOver records that the cast is over: a PC that netboots from now on
// would find no cast to join.
func (d *diskBoots) castOver() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.over = true
}

// sentTo records that the PC with this MAC has what sends it to its disk:
// only then may the netboot service stop.
func (d *diskBoots) sentTo(mac string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	node, ok := d.verified[mac]
	if !ok {
		return
	}
	d.sent[node] = true
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// left is how many verified nodes have not been sent to their disks, of
// how many.
func (d *diskBoots) left() (left, of int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes := map[string]bool{}
	for _, n := range d.verified {
		nodes[n] = true
	}
	for n := range nodes {
		if !d.sent[n] {
			left++
		}
	}
	return left, len(nodes)
}

// await keeps the netboot service up after a cast whose PCs reboot, until
// every verified PC has netbooted again and been sent to its disk, or
// limit passes, or ctx ends: a PC that finds no netboot service boots its
// disk all the same, but only once its firmware gives up on the network.
func (d *diskBoots) await(ctx context.Context, limit time.Duration, out io.Writer) {
	left, of := d.left()
	if left == 0 {
		return
	}
	fmt.Fprintf(out, "netboot: the %d verified PCs reboot; serving them their own disks for up to %s (Ctrl-C ends it)\n", of, limit)
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for left > 0 {
		select {
		case <-d.changed:
		case <-deadline.C:
			fmt.Fprintf(out, "netboot: %d of %d PCs did not netboot again within %s; they boot their disks once their firmware gives up on the network\n", left, of, limit)
			return
		case <-ctx.Done():
			return
		}
		left, _ = d.left()
	}
	fmt.Fprintf(out, "netboot: all %d PCs were sent to their own disks\n", of)
}
