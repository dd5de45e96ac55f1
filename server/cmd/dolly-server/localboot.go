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
// keep the network first in their boot order.
type diskBoots struct {
	mu       sync.Mutex
	verified map[string]string // node name by MAC
	sent     map[string]bool   // nodes sent to their disks
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

// why says why the PC with this MAC boots its disk, "" if it does not;
// the PC counts as sent there.
func (d *diskBoots) why(mac string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	node, ok := d.verified[mac]
	if !ok {
		return ""
	}
	d.sent[node] = true
	select {
	case d.changed <- struct{}{}:
	default:
	}
	return node + " is verified in this cast"
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
