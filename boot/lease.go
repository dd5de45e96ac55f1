package boot

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// DefaultLeaseTime is how long full DHCP leases last.
const DefaultLeaseTime = time.Hour

// leaseTable hands out the addresses of a range, keyed by MAC, in memory.
// Allocation is deterministic: a MAC keeps its address while nobody else
// needs it, and new clients get the lowest free address.
type leaseTable struct {
	from, to netip.Addr
	reserved map[netip.Addr]bool // this server and the router
	ttl      time.Duration
	now      func() time.Time

	mu       sync.Mutex
	byMAC    map[string]*lease
	byAddr   map[netip.Addr]*lease
	declined map[netip.Addr]time.Time // until when a client found it in use
}

type lease struct {
	mac    string
	addr   netip.Addr
	expiry time.Time
}

func newLeaseTable(from, to netip.Addr, ttl time.Duration, reserved ...netip.Addr) *leaseTable {
	t := &leaseTable{
		from: from, to: to, ttl: ttl, now: time.Now,
		reserved: make(map[netip.Addr]bool),
		byMAC:    make(map[string]*lease),
		byAddr:   make(map[netip.Addr]*lease),
		declined: make(map[netip.Addr]time.Time),
	}
	for _, a := range reserved {
		t.reserved[a] = true
	}
	return t
}

// offer returns the address for mac, leasing one if it has none.
func (t *leaseTable) offer(mac net.HardwareAddr) (netip.Addr, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if l := t.byMAC[string(mac)]; l != nil {
		l.expiry = now.Add(t.ttl)
		return l.addr, nil
	}
	a, ok := t.free(now)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: all %v-%v are leased", errRangeExhausted, t.from, t.to)
	}
	t.assign(string(mac), a, now)
	return a, nil
}

// request confirms that mac may use want, leasing it if it is free.
func (t *leaseTable) request(mac net.HardwareAddr, want netip.Addr) (netip.Addr, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if l := t.byMAC[string(mac)]; l != nil && l.addr == want {
		l.expiry = now.Add(t.ttl)
		return want, nil
	}
	if !t.usable(want, now) {
		return netip.Addr{}, fmt.Errorf("%v is not free for %v", want, mac)
	}
	t.assign(string(mac), want, now)
	return want, nil
}

// release ends mac's lease of addr.
func (t *leaseTable) release(mac net.HardwareAddr, addr netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.byMAC[string(mac)]; l != nil && l.addr == addr {
		t.remove(l)
	}
}

// decline takes addr out of use for a lease time: mac found another
// host using it.
func (t *leaseTable) decline(mac net.HardwareAddr, addr netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.byMAC[string(mac)]; l != nil && l.addr == addr {
		t.remove(l)
	}
	if t.inRange(addr) {
		t.declined[addr] = t.now().Add(t.ttl)
	}
}

// free returns the lowest never-leased address, or else the address of
// the lease that expired longest ago. The scan stops at the first address
// not leased, reserved or declined, so it is short whatever the size of
// the range.
func (t *leaseTable) free(now time.Time) (netip.Addr, bool) {
	for a := t.from; a.IsValid() && a.Compare(t.to) <= 0; a = a.Next() {
		if t.byAddr[a] == nil && t.usable(a, now) {
			return a, true
		}
	}
	var oldest *lease
	for _, l := range t.byAddr {
		if !now.After(l.expiry) || !t.usable(l.addr, now) {
			continue
		}
		// Ties go to the lower address, so the choice does not depend
		// on the map's order.
		if oldest == nil || l.expiry.Before(oldest.expiry) ||
			l.expiry.Equal(oldest.expiry) && l.addr.Less(oldest.addr) {
			oldest = l
		}
	}
	if oldest == nil {
		return netip.Addr{}, false
	}
	return oldest.addr, true
}

// usable reports whether a may be leased to a new owner.
func (t *leaseTable) usable(a netip.Addr, now time.Time) bool {
	if !t.inRange(a) || t.reserved[a] {
		return false
	}
	if until, ok := t.declined[a]; ok {
		if now.Before(until) {
			return false
		}
		delete(t.declined, a)
	}
	l := t.byAddr[a]
	return l == nil || now.After(l.expiry)
}

func (t *leaseTable) inRange(a netip.Addr) bool {
	return a.Is4() && a.Compare(t.from) >= 0 && a.Compare(t.to) <= 0
}

// assign leases a to mac, ending mac's and a's previous leases.
func (t *leaseTable) assign(mac string, a netip.Addr, now time.Time) {
	if l := t.byMAC[mac]; l != nil {
		t.remove(l)
	}
	if l := t.byAddr[a]; l != nil {
		t.remove(l)
	}
	l := &lease{mac: mac, addr: a, expiry: now.Add(t.ttl)}
	t.byMAC[mac] = l
	t.byAddr[a] = l
}

func (t *leaseTable) remove(l *lease) {
	delete(t.byMAC, l.mac)
	delete(t.byAddr, l.addr)
}
