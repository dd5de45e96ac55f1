package probe

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// nicSpeed finds the interface holding ip (or the default route's) and
// reads the speed it negotiated.
func nicSpeed(ip net.IP) (string, float64, error) {
	name, err := interfaceFor(ip)
	if err != nil {
		return "", 0, err
	}
	if name == "lo" {
		return name, 0, errors.New("loopback has no link speed (no link limit is modelled)")
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "speed"))
	if err != nil {
		return name, 0, fmt.Errorf("%s reports no speed (a bridge, a tunnel or a virtual NIC?)", name)
	}
	mbit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || mbit <= 0 {
		return name, 0, fmt.Errorf("%s reports no speed (link down, or a virtual NIC)", name)
	}
	return name, float64(mbit) * 1e6 / 8, nil
}

func interfaceFor(ip net.IP) (string, error) {
	if ip == nil {
		return defaultRouteInterface()
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return i.Name, nil
			}
		}
	}
	if ip.IsLoopback() {
		return "lo", nil
	}
	return "", fmt.Errorf("no interface holds %s", ip)
}

// defaultRouteInterface reads the kernel's IPv4 routing table.
func defaultRouteInterface() (string, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 2 && fields[1] == "00000000" && fields[0] != "Iface" {
			return fields[0], nil
		}
	}
	return "", errors.New("no default route")
}

// LocalIPFor returns the local address this machine would use to reach
// addr (host:port or host), without sending anything.
func LocalIPFor(addr string) (net.IP, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return nil, fmt.Errorf("no route to %s: %w", host, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

// NICSpeed returns the interface holding ip and the speed it negotiated in
// bytes per second, or an error saying why it is unknown.
func NICSpeed(ip net.IP) (string, float64, error) { return nicSpeed(ip) }

// MACs lists the hardware addresses of the machine's interfaces.
func MACs() []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && len(i.HardwareAddr) > 0 {
			out = append(out, i.HardwareAddr.String())
		}
	}
	return out
}

// MachineID identifies the running kernel: every process on one machine,
// in whatever network namespace, reads the same boot ID, and two machines
// never do. It is hashed, so that it says nothing else. "" where the
// kernel does not tell.
func MachineID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	sum := sha256.Sum256(bytes.TrimSpace(b))
	return hex.EncodeToString(sum[:8])
}
