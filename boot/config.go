package boot

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultKernel returns the host's newest /boot/vmlinuz-*. The kernel of
// Debian's linux-image-amd64 is the tested one.
func DefaultKernel() (string, error) {
	paths, err := filepath.Glob("/boot/vmlinuz-*")
	if err != nil || len(paths) == 0 {
		return "", errors.New("no kernel in /boot/vmlinuz-*: install Debian's linux-image-amd64 or pass -kernel PATH")
	}
	return newestKernel(paths), nil
}

// newestKernel returns the path with the highest version, comparing runs
// of digits as numbers, so that 6.1.0-56 is newer than 6.1.0-9.
func newestKernel(paths []string) string {
	return slices.MaxFunc(paths, compareVersions)
}

func compareVersions(a, b string) int {
	for a != "" && b != "" {
		ra, rb := leadingRun(a), leadingRun(b)
		a, b = a[len(ra):], b[len(rb):]
		if isDigit(ra[0]) && isDigit(rb[0]) {
			ra, rb = strings.TrimLeft(ra, "0"), strings.TrimLeft(rb, "0")
			if len(ra) != len(rb) {
				return len(ra) - len(rb)
			}
		}
		if c := strings.Compare(ra, rb); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

// leadingRun returns s's leading run of digits or of non-digits.
func leadingRun(s string) string {
	d := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == d {
		i++
	}
	return s[:i]
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// ParseRange parses a DHCP range "FROM-TO" of IPv4 addresses.
func ParseRange(s string) (from, to netip.Addr, err error) {
	f, t, ok := strings.Cut(s, "-")
	if ok {
		from, err = netip.ParseAddr(strings.TrimSpace(f))
	}
	if ok && err == nil {
		to, err = netip.ParseAddr(strings.TrimSpace(t))
	}
	switch {
	case !ok || err != nil || !from.Is4() || !to.Is4():
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("DHCP range %q: want two IPv4 addresses, FROM-TO, e.g. 198.18.0.100-198.18.0.199", s)
	case to.Less(from):
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("DHCP range %q: %v comes after %v", s, from, to)
	}
	return from, to, nil
}

// interfaceAddr returns the interface to serve on and its first IPv4
// address with its prefix length.
func interfaceAddr(name string) (string, netip.Prefix, error) {
	if name == "" {
		return pickInterface()
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return "", netip.Prefix{}, fmt.Errorf("interface %q: %w (see ip link): pass -interface IFACE", name, err)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return "", netip.Prefix{}, fmt.Errorf("interface %s is down: ip link set %s up", name, name)
	}
	p, ok := firstIPv4(ifi)
	if !ok {
		return "", netip.Prefix{}, fmt.Errorf("interface %s has no IPv4 address: give it one (ip addr add ADDR/LEN dev %s) or pass another -interface", name, name)
	}
	return name, p, nil
}

// pickInterface returns the only interface that is up, not loopback and
// has an IPv4 address.
func pickInterface() (string, netip.Prefix, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", netip.Prefix{}, fmt.Errorf("listing network interfaces: %w", err)
	}
	var names []string
	var prefix netip.Prefix
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		if p, ok := firstIPv4(&ifi); ok {
			names = append(names, ifi.Name)
			prefix = p
		}
	}
	switch len(names) {
	case 0:
		return "", netip.Prefix{}, errors.New("no network interface is up with an IPv4 address: configure the lab NIC and pass -interface IFACE")
	case 1:
		return names[0], prefix, nil
	}
	return "", netip.Prefix{}, fmt.Errorf("several interfaces have IPv4 addresses (%s): choose the lab's with -interface IFACE", strings.Join(names, ", "))
}

func firstIPv4(ifi *net.Interface) (netip.Prefix, bool) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Prefix{}, false
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP.To4())
		ones, bits := n.Mask.Size()
		if bits != 32 {
			continue
		}
		return netip.PrefixFrom(ip, ones), true
	}
	return netip.Prefix{}, false
}

// checkFiles checks that every file to serve is there and readable.
func checkFiles(c *Config) error {
	type served struct{ what, path, fix string }
	files := []served{
		{"kernel", c.Kernel, "pass -kernel PATH (Debian's linux-image-amd64 is tested)"},
		{"initramfs", c.Initramfs, "build it (see initramfs/) or pass -initramfs PATH"},
		{"iPXE for BIOS", c.BIOSFile, "install Debian's ipxe package or pass -ipxe-bios PATH"},
	}
	const shimFix, grubFix = "install Debian's shim-signed or pass -shim PATH", "install Debian's grub-efi-amd64-signed or pass -grub PATH"
	if c.SecureBoot {
		// UEFI PCs get Shim and GRUB in place of iPXE.
		files = append(files, served{"Shim", c.ShimFile, shimFix}, served{"GRUB", c.GrubFile, grubFix})
	} else {
		files = append(files, served{"iPXE for UEFI", c.EFIFile, "install Debian's ipxe package or pass -ipxe-efi PATH"})
	}
	if a := c.ARM64; a != nil {
		files = append(files,
			served{"iPXE for ARM64 UEFI", a.IPXE, "build it (iPXE's make bin-arm64-efi/ipxe.efi) or pass -ipxe-arm64 PATH"},
			served{"ARM64 kernel", a.Kernel, "pass -kernel-arm64 PATH (Debian's linux-image-arm64)"},
			served{"ARM64 initramfs", a.Initramfs, "build it (make initramfs-arm64) or pass -initramfs-arm64 PATH"})
	}
	for _, f := range files {
		if f.path == "" {
			return fmt.Errorf("no %s to serve: %s", f.what, f.fix)
		}
		fh, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("%s %s: %w: %s", f.what, f.path, err, f.fix)
		}
		fi, err := fh.Stat()
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s %s: %w", f.what, f.path, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s %s is not a regular file: %s", f.what, f.path, f.fix)
		}
	}
	if !c.SecureBoot {
		return nil
	}
	for _, f := range []served{
		{"Shim", c.ShimFile, shimFix},
		{"GRUB", c.GrubFile, grubFix},
		{"kernel", c.Kernel, "pass -kernel with a signed kernel (Debian's linux-image-amd64 is)"},
	} {
		if err := checkSigned(f.what, f.path, f.fix); err != nil {
			return err
		}
	}
	return nil
}

// controlAddr returns addr with an empty or unspecified host replaced by
// ip, the address nodes can reach.
func controlAddr(addr string, ip netip.Addr) (string, error) {
	if addr == "" {
		return "", errors.New("no control address for dolly.server=")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("control address %q: %w", addr, err)
	}
	if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
		host = ip.String()
	}
	return net.JoinHostPort(host, port), nil
}

// checkRange checks the full DHCP range and router against the subnet of
// the interface.
func checkRange(c *Config, iface string, server netip.Prefix) error {
	subnet := server.Masked()
	from, to := c.RangeFrom, c.RangeTo
	switch {
	case !from.Is4() || !to.Is4():
		return fmt.Errorf("DHCP range %v-%v: want two IPv4 addresses", from, to)
	case to.Less(from):
		return fmt.Errorf("DHCP range %v-%v: %v comes after %v", from, to, from, to)
	case !subnet.Contains(from) || !subnet.Contains(to):
		return fmt.Errorf("DHCP range %v-%v is outside %s's subnet %v: pick addresses in it", from, to, iface, subnet)
	case subnet.Bits() < 31 && (from == subnet.Addr() || to == broadcastAddr(subnet)):
		return fmt.Errorf("DHCP range %v-%v includes the network or broadcast address of %v", from, to, subnet)
	case c.Router.IsValid() && !subnet.Contains(c.Router):
		return fmt.Errorf("router %v is outside %s's subnet %v", c.Router, iface, subnet)
	}
	return nil
}
