//go:build linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/u-root/u-root/pkg/libinit"
	"github.com/vishvananda/netlink"
)

// lease is what DHCP gave one interface.
type lease struct {
	iface    string
	mac      net.HardwareAddr
	addr     string
	hostname string
}

// bringUpNetwork asks for a DHCPv4 lease on every interface but loopback
// and configures each interface that gets one, trying again until at least
// one has a lease or the timeout passes.
func bringUpNetwork(ctx context.Context, log *slog.Logger, timeout time.Duration) ([]lease, error) {
	libinit.NetInit() // loopback up
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := time.Second
	for attempt := 1; ; attempt++ {
		links, err := nics()
		if err != nil {
			return nil, err
		}
		var leases []lease
		if len(links) > 0 {
			leases = dhcp(ctx, log, links)
		} else {
			log.Warn("no network interface yet", "attempt", attempt)
		}
		if len(leases) > 0 {
			return leases, nil
		}
		select {
		case <-ctx.Done():
			if len(links) == 0 {
				return nil, fmt.Errorf("no network interface after %s: is the NIC's driver in the initramfs? (ls /sys/class/net)", timeout)
			}
			return nil, fmt.Errorf("no DHCP lease on %s after %s: check the cable and the DHCP server", linkNames(links), timeout)
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// dhcp runs one round of DHCP on the links and configures the leases.
func dhcp(ctx context.Context, log *slog.Logger, links []netlink.Link) []lease {
	cfg := dhclient.Config{Timeout: 5 * time.Second, Retries: 2}
	var leases []lease
	for r := range dhclient.SendRequests(ctx, links, true, false, cfg, 10*time.Second) {
		name := r.Interface.Attrs().Name
		if r.Err != nil {
			log.Warn("DHCP", "interface", name, "err", r.Err)
			continue
		}
		if err := r.Lease.Configure(); err != nil {
			log.Warn("configuring the DHCP lease", "interface", name, "err", err)
			continue
		}
		l := lease{iface: name, mac: r.Interface.Attrs().HardwareAddr}
		if msg, _ := r.Lease.Message(); msg != nil {
			l.addr = msg.YourIPAddr.String()
			l.hostname = msg.HostName()
			log.Info("DHCP lease", "interface", name, "mac", l.mac, "addr", l.addr,
				"mask", net.IP(msg.SubnetMask()), "router", msg.Router(), "server", msg.ServerIdentifier(),
				"hostname", l.hostname)
		} else {
			log.Info("DHCP lease", "interface", name, "lease", r.Lease)
		}
		leases = append(leases, l)
	}
	slices.SortFunc(leases, func(a, b lease) int { return strings.Compare(a.iface, b.iface) })
	return leases
}

// nics returns the network interfaces DHCP should try: every one but
// loopback and those enslaved to a bond.
func nics() ([]netlink.Link, error) {
	all, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var links []netlink.Link
	for _, l := range all {
		if l.Attrs().Flags&net.FlagLoopback != 0 || l.Attrs().Name == "lo" {
			continue
		}
		links = append(links, l)
	}
	return dhclient.FilterBondedInterfaces(links, false), nil
}

func linkNames(links []netlink.Link) string {
	names := make([]string, len(links))
	for i, l := range links {
		names[i] = l.Attrs().Name
	}
	return strings.Join(names, ", ")
}
