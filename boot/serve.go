package boot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pin/tftp/v3"
)

// Defaults. The iPXE builds are those of Debian's ipxe package.
const (
	DefaultBIOSFile = "/usr/lib/ipxe/undionly.kpxe"
	DefaultEFIFile  = "/usr/lib/ipxe/ipxe.efi"
	// DefaultHTTPPort is next to dolly-server's control port 9700.
	DefaultHTTPPort = 9701

	// DefaultARM64File is where iPXE built for ARM64 UEFI would be
	// installed next to Debian's (which ships none: build it with iPXE's
	// "make bin-arm64-efi/ipxe.efi", or take a distribution's).
	DefaultARM64File = "/usr/lib/ipxe/ipxe-arm64.efi"

	biosName  = "undionly.kpxe" // TFTP names clients are given
	efiName   = "ipxe.efi"
	arm64Name = "ipxe-arm64.efi"
	// arm64Arch is what iPXE's ${buildarch} says on ARM64, and the name
	// of the HTTP directory its kernel and initramfs are served from.
	arm64Arch = "arm64"
)

// DefaultARM64Console is the console part of an ARM64 PC's kernel command
// line: the first PL011 serial port (the usual one on ARM64 boards and in
// qemu's virt machine) and the screen.
var DefaultARM64Console = []string{"console=ttyAMA0,115200", "console=tty0"}

// DefaultConsole is the console part of the kernel command line: kernel
// messages go to the first serial port and the screen, and the last one,
// the screen, is /dev/console.
var DefaultConsole = []string{"console=ttyS0,115200", "console=tty0"}

// Config configures the netboot services.
type Config struct {
	// Interface is the network interface to serve on; its first IPv4
	// address is the server's address. Empty picks the only interface that
	// is up, not loopback and has an IPv4 address.
	Interface string
	// RangeFrom and RangeTo, when set, turn on full DHCP leasing these
	// addresses, for a lab switch without a DHCP server. Unset, the
	// server runs proxyDHCP next to the site's DHCP server.
	RangeFrom, RangeTo netip.Addr
	Router             netip.Addr    // optional default gateway for full DHCP
	LeaseTime          time.Duration // default DefaultLeaseTime

	BIOSFile string // iPXE for BIOS clients (default DefaultBIOSFile)
	EFIFile  string // iPXE for x86-64 UEFI clients (default DefaultEFIFile)
	// SecureBoot boots UEFI PCs through Shim and GRUB, both signed, in
	// place of iPXE, which Secure Boot firmware refuses; the kernel must
	// be signed too (Debian's is). BIOS PCs still boot iPXE.
	SecureBoot bool
	ShimFile   string // default DefaultShimFile
	GrubFile   string // default DefaultGrubFile
	Kernel     string // the Linux kernel nodes boot (required; see DefaultKernel)
	// Initramfs is the initramfs with the dolly node (required).
	Initramfs string
	// ARM64, if set, netboots ARM64 UEFI PCs (DHCP architecture 11) too;
	// unset, they get no reply, and the log says why.
	ARM64 *ARM64Boot

	// ControlAddr is dolly-server's control address, host:port, passed
	// to nodes as dolly.server=. An empty or unspecified host stands for
	// the interface's address.
	ControlAddr string
	// Console is the console part of the kernel command line; nil means
	// DefaultConsole.
	Console []string
	// KernelArgs are appended verbatim to the kernel command line.
	KernelArgs []string
	// LocalBoot, if set, says why the PC with this MAC address (lower
	// case, colon-separated) should boot its own disk rather than the
	// node, or "" if it should not: one already cloned, say. Such a PC
	// gets LocalScript, so that PCs may keep booting from the network
	// first.
	LocalBoot func(mac string) string
	// LocalSent, if set, is told the MAC address of a PC once it has
	// been sent what LocalBoot chose for it, so that the services are not
	// stopped while it is on its way.
	LocalSent func(mac string)
	// Answer, if set, says whether to answer the machine with this MAC
	// address (lower case, colons) at all: the machines the admin listed.
	// The others get no DHCP reply, as if this server were not there.
	Answer func(mac string) bool
	// Other, if set, serves every HTTP path that is not a boot file:
	// dolly-server's status page, on the port the PCs boot from.
	Other http.Handler

	// Ports; zero means the standard ones. Tests use others.
	HTTPPort   int // default DefaultHTTPPort
	DHCPPort   int // 67
	ClientPort int // 68, where DHCP replies go
	PXEPort    int // 4011
	TFTPPort   int // 69

	Logger *slog.Logger
}

// ARM64Boot is what ARM64 UEFI PCs boot: iPXE built for them, then a
// kernel and an initramfs for ARM64 (the x86-64 ones would not run). Under
// SecureBoot they still get iPXE, which a Secure Boot firmware refuses.
type ARM64Boot struct {
	IPXE      string // default DefaultARM64File
	Kernel    string // required
	Initramfs string // required: the dolly node built for ARM64
	// Console is the console part of their kernel command line; nil
	// means Config.Console if that is set, else DefaultARM64Console.
	Console []string
}

// kernelArgs is the nodes' kernel command line: where the server is, the
// console, then what the admin added.
func kernelArgs(control string, console, extra []string) []string {
	args := append([]string{"dolly.server=" + control}, console...)
	return append(args, extra...)
}

// Server runs the netboot services. New checks the configuration and
// opens every socket, so that mistakes show before a cast starts.
type Server struct {
	cfg       Config
	log       *slog.Logger
	iface     string
	resp      *responder
	scriptURL string

	archTold sync.Map // MACs told that their architecture is not served

	dhcpConn, pxeConn, tftpConn *net.UDPConn
	httpLn                      net.Listener
	tftp                        *tftp.Server
	http                        *http.Server
}

// Serve runs the netboot services until ctx is done.
func Serve(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// New checks cfg and opens the services' sockets.
func New(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	c := &s.cfg
	c.BIOSFile = cmp.Or(c.BIOSFile, DefaultBIOSFile)
	c.EFIFile = cmp.Or(c.EFIFile, DefaultEFIFile)
	c.ShimFile = cmp.Or(c.ShimFile, DefaultShimFile)
	c.GrubFile = cmp.Or(c.GrubFile, DefaultGrubFile)
	c.HTTPPort = cmp.Or(c.HTTPPort, DefaultHTTPPort)
	c.DHCPPort = cmp.Or(c.DHCPPort, 67)
	c.ClientPort = cmp.Or(c.ClientPort, 68)
	c.PXEPort = cmp.Or(c.PXEPort, 4011)
	c.TFTPPort = cmp.Or(c.TFTPPort, 69)
	if c.LeaseTime <= 0 {
		c.LeaseTime = DefaultLeaseTime
	}
	if c.ARM64 != nil {
		a := *c.ARM64
		a.IPXE = cmp.Or(a.IPXE, DefaultARM64File)
		switch {
		case a.Console != nil:
		case c.Console != nil: // the admin's choice, for every PC
			a.Console = c.Console
		default:
			a.Console = DefaultARM64Console
		}
		c.ARM64 = &a
	}
	if c.Console == nil {
		c.Console = DefaultConsole
	}

	iface, prefix, err := interfaceAddr(c.Interface)
	if err != nil {
		return nil, err
	}
	s.iface = iface
	if err := checkFiles(c); err != nil {
		return nil, err
	}
	control, err := controlAddr(c.ControlAddr, prefix.Addr())
	if err != nil {
		return nil, err
	}
	base := "http://" + net.JoinHostPort(prefix.Addr().String(), strconv.Itoa(c.HTTPPort))
	s.scriptURL = base + "/boot.ipxe"
	s.resp = &responder{
		server:    prefix,
		router:    c.Router,
		biosFile:  biosName,
		efiFile:   efiName,
		scriptURL: s.scriptURL,
		answer:    c.Answer,
		unserved: func(mac string, err error) {
			// Once per machine: its firmware asks again every few seconds.
			if _, told := s.archTold.LoadOrStore(mac, true); !told {
				s.log.Warn("dhcp: no boot file", "mac", mac, "reason", err)
			}
		},
	}
	if c.RangeFrom.IsValid() || c.RangeTo.IsValid() {
		if err := checkRange(c, iface, prefix); err != nil {
			return nil, err
		}
		s.resp.leases = newLeaseTable(c.RangeFrom, c.RangeTo, c.LeaseTime, prefix.Addr(), c.Router)
	}

	args := kernelArgs(control, c.Console, c.KernelArgs)
	boots := map[string]archBoot{"": {Script(base, args), c.Kernel, c.Initramfs}}
	if a := c.ARM64; a != nil {
		s.resp.arm64File = arm64Name
		boots[arm64Arch] = archBoot{Script(base+"/"+arm64Arch, kernelArgs(control, a.Console, c.KernelArgs)), a.Kernel, a.Initramfs}
	}
	s.http = &http.Server{
		Handler:           httpHandler(base, boots, c.LocalBoot, c.LocalSent, c.Other, s.log),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A kernel and an initramfs at a slow firmware's pace take a
		// while; a client that stalls longer is let go.
		WriteTimeout: 10 * time.Minute,
		IdleTimeout:  time.Minute,
	}
	files := map[string]string{biosName: c.BIOSFile, efiName: c.EFIFile}
	var generated func(string) (generatedFile, bool)
	if c.SecureBoot {
		s.resp.efiFile = shimName
		files = map[string]string{biosName: c.BIOSFile, shimName: c.ShimFile, grubName: c.GrubFile,
			kernelName: c.Kernel, initramfsName: c.Initramfs}
		generated = grubFiles(GrubConfig(prefix.Addr().String(), args), c.LocalBoot, c.LocalSent)
	}
	if c.ARM64 != nil {
		files[arm64Name] = c.ARM64.IPXE
	}
	s.tftp = newTFTP(files, generated, s.log)

	if err := s.listen(iface, prefix.Addr()); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// listen opens the sockets. DHCP listens on 0.0.0.0 to hear broadcasts
// and is bound to the interface so that replies leave through it.
func (s *Server) listen(iface string, ip netip.Addr) error {
	c := &s.cfg
	var err error
	s.dhcpConn, err = listenUDPDevice(iface, c.DHCPPort)
	if err != nil {
		return portErr("DHCP", "UDP", c.DHCPPort, iface, "is another DHCP server (dnsmasq?) running on this machine?", err)
	}
	s.pxeConn, err = listenUDPDevice(iface, c.PXEPort)
	if err != nil {
		return portErr("PXE", "UDP", c.PXEPort, iface, "is another PXE server running on this machine?", err)
	}
	s.tftpConn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(c.TFTPPort))))
	if err != nil {
		return portErr("TFTP", "UDP", c.TFTPPort, ip.String(), "is another TFTP server running on this machine?", err)
	}
	s.httpLn, err = net.Listen("tcp4", net.JoinHostPort(ip.String(), strconv.Itoa(c.HTTPPort)))
	if err != nil {
		return portErr("HTTP", "TCP", c.HTTPPort, ip.String(), "pass -http-port N", err)
	}
	return nil
}

func portErr(service, proto string, port int, where, hint string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s: %s port %d on %s is in use: %s", service, proto, port, where, hint)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: %s port %d on %s needs root (or CAP_NET_BIND_SERVICE): %w", service, proto, port, where, err)
	}
	return fmt.Errorf("%s: listening on %s port %d on %s: %w", service, proto, port, where, err)
}

// Mode describes what the server does, for the admin.
func (s *Server) Mode() string {
	mode := "proxyDHCP"
	if s.resp.leases != nil {
		mode = fmt.Sprintf("DHCP %v-%v", s.cfg.RangeFrom, s.cfg.RangeTo)
	}
	return fmt.Sprintf("%s on %s (%v), TFTP, iPXE script %s", mode, s.iface, s.resp.server.Addr(), s.scriptURL)
}

// ScriptURL is the URL of the iPXE script.
func (s *Server) ScriptURL() string { return s.scriptURL }

// Serve runs the services until ctx is done or one of them fails, then
// stops them all. It returns nil after ctx is done.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.log.Info("netboot", "serving", s.Mode())
	errc := make(chan error, 4)
	go func() { errc <- s.serveDHCP(ctx, s.dhcpConn, false) }()
	go func() { errc <- s.serveDHCP(ctx, s.pxeConn, true) }()
	go func() {
		if err := s.tftp.Serve(s.tftpConn); err != nil {
			errc <- fmt.Errorf("TFTP: %w", err)
			return
		}
		errc <- nil
	}()
	go func() {
		if err := s.http.Serve(s.httpLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP: %w", err)
			return
		}
		errc <- nil
	}()
	var first error
	done := 0
	select {
	case <-ctx.Done():
	case first = <-errc:
		done++
		if first == nil {
			first = errors.New("netboot: a service stopped unexpectedly")
		}
	}
	cancel() // before closing, so the loops know the errors are expected
	s.close()
	for ; done < cap(errc); done++ {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

// close releases whatever New opened.
func (s *Server) close() {
	for _, c := range []*net.UDPConn{s.dhcpConn, s.pxeConn} {
		if c != nil {
			c.Close()
		}
	}
	if s.tftpConn != nil {
		s.tftp.Shutdown()
		s.tftpConn.Close()
	}
	if s.httpLn != nil {
		s.http.Close()
		s.httpLn.Close()
	}
}

// serveDHCP answers the DHCP requests arriving on conn.
func (s *Server) serveDHCP(ctx context.Context, conn *net.UDPConn, pxePort bool) error {
	buf := make([]byte, 4096) // DHCP messages fit one Ethernet frame
	for {
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("DHCP: reading: %w", err)
		}
		req, err := ParsePacket(buf[:n])
		if err != nil {
			s.log.Debug("dhcp: bad packet", "from", src, "err", err)
			continue
		}
		resp, err := s.resp.reply(req, pxePort)
		if err != nil {
			level := slog.LevelDebug
			if errors.Is(err, errRangeExhausted) {
				level = slog.LevelWarn
			}
			s.log.Log(ctx, level, "dhcp: no reply", "mac", req.MAC().String(), "type", req.MessageType(), "reason", err)
			continue
		}
		dst := s.replyAddr(req, resp, src, pxePort)
		if _, err := conn.WriteToUDPAddrPort(resp.Marshal(), dst); err != nil {
			s.log.Warn("dhcp: sending reply", "mac", req.MAC().String(), "to", dst, "err", err)
			continue
		}
		s.log.Info("dhcp", "reply", msgName(resp.MessageType()), "mac", req.MAC().String(), "ip", resp.YIAddr,
			"file", resp.File, "to", dst)
	}
}

// replyAddr is where resp to req goes (RFC 2131, section 4.1): to the
// source for PXE port requests, to a relay agent, to a client that has an
// address, or else broadcast, since a client without an address cannot
// receive unicast before it knows it has one.
func (s *Server) replyAddr(req, resp *Packet, src netip.AddrPort, pxePort bool) netip.AddrPort {
	switch {
	case pxePort:
		return src
	case req.GIAddr.IsValid():
		return netip.AddrPortFrom(req.GIAddr, uint16(s.cfg.DHCPPort))
	case req.CIAddr.IsValid() && resp.MessageType() != msgNak:
		return netip.AddrPortFrom(req.CIAddr, uint16(s.cfg.ClientPort))
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), uint16(s.cfg.ClientPort))
}

func msgName(t byte) string {
	switch t {
	case msgOffer:
		return "offer"
	case msgAck:
		return "ack"
	case msgNak:
		return "nak"
	}
	return strconv.Itoa(int(t))
}
