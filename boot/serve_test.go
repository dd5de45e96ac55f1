package boot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// testFiles writes stand-ins for the files the server serves.
func testFiles(t *testing.T) Config {
	dir := t.TempDir()
	return Config{
		Interface:   "lo",
		Kernel:      writeFile(t, dir, "vmlinuz", 50_000),
		Initramfs:   writeFile(t, dir, "initramfs.cpio.gz", 40_000),
		BIOSFile:    writeFile(t, dir, "undionly.kpxe", 30_000),
		EFIFile:     writeFile(t, dir, "ipxe.efi", 20_000),
		ControlAddr: ":9700",
	}
}

func TestNewChecks(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no kernel", func(c *Config) { c.Kernel = "" }, "-kernel PATH"},
		{"missing kernel", func(c *Config) { c.Kernel += ".gone" }, "kernel " + "/"},
		{"missing initramfs", func(c *Config) { c.Initramfs = "/nonexistent/initramfs.cpio.gz" }, "initramfs /nonexistent/initramfs.cpio.gz"},
		{"missing iPXE", func(c *Config) { c.BIOSFile = "/nonexistent/undionly.kpxe" }, "install Debian's ipxe package or pass -ipxe-bios PATH"},
		{"directory as iPXE", func(c *Config) { c.EFIFile = os.TempDir() }, "not a regular file"},
		{"unknown interface", func(c *Config) { c.Interface = "nosuchif0" }, `interface "nosuchif0"`},
		{"range outside subnet", func(c *Config) {
			c.RangeFrom, c.RangeTo = netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.20")
		}, "outside lo's subnet 127.0.0.0/8"},
		{"half a range", func(c *Config) { c.RangeTo = netip.MustParseAddr("127.0.0.20") }, "want two IPv4 addresses"},
		{"bad control address", func(c *Config) { c.ControlAddr = "9700" }, "control address"},
		{"ARM64 iPXE missing", func(c *Config) {
			c.ARM64 = &ARM64Boot{IPXE: "/nonexistent/ipxe-arm64.efi", Kernel: c.Kernel, Initramfs: c.Initramfs}
		}, "iPXE for ARM64 UEFI /nonexistent/ipxe-arm64.efi"},
		{"ARM64 without a kernel", func(c *Config) { c.ARM64 = &ARM64Boot{IPXE: c.EFIFile, Initramfs: c.Initramfs} }, "pass -kernel-arm64 PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testFiles(t)
			tt.change(&c)
			wantNewError(t, c, tt.want)
		})
	}
}

// wantNewError checks that New refuses c with an error containing want.
func wantNewError(t *testing.T, c Config, want string) {
	t.Helper()
	s, err := New(c)
	if err == nil {
		s.close()
		t.Fatalf("New succeeded, want an error containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("New: %v\nwant an error containing %q", err, want)
	}
}

// serveLoopback serves cfg with full DHCP on loopback, on free ports,
// until the test ends, and returns the server, a DHCP client at
// 127.0.0.100 and the configuration served. A renewing client has an
// address, so the ACK comes to it by unicast rather than by broadcast,
// which loopback lacks.
func serveLoopback(t *testing.T, cfg Config) (*Server, *net.UDPConn, Config) {
	t.Helper()
	cfg.RangeFrom, cfg.RangeTo = netip.MustParseAddr("127.0.0.100"), netip.MustParseAddr("127.0.0.109")
	cfg.DHCPPort, cfg.PXEPort, cfg.TFTPPort = freePort(t, "udp"), freePort(t, "udp"), freePort(t, "udp")
	cfg.HTTPPort = freePort(t, "tcp")
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 100)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cfg.ClientPort = client.LocalAddr().(*net.UDPAddr).Port
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	})
	return s, client, cfg
}

// freePort returns a port that was free on 127.0.0.1 a moment ago, and
// that it has not returned before: the kernel may hand a port it just
// freed out again, and a server given the same port twice fails.
func freePort(t *testing.T, network string) int {
	t.Helper()
	for {
		var addr net.Addr
		if network == "udp" {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			addr = c.LocalAddr()
			c.Close()
		} else {
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr = l.Addr()
			l.Close()
		}
		_, port, _ := net.SplitHostPort(addr.String())
		n, _ := strconv.Atoi(port)
		if _, taken := portsHandedOut.LoadOrStore(network+port, true); !taken {
			return n
		}
	}
}

// portsHandedOut are the ports freePort has returned in this process.
var portsHandedOut sync.Map

// exchange sends req from conn to the server at port and returns the reply.
func exchange(t *testing.T, conn *net.UDPConn, port int, req *Packet) *Packet {
	t.Helper()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	if _, err := conn.WriteToUDP(req.Marshal(), to); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	resp, err := ParsePacket(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestServe runs every service on the loopback interface. Binding to a
// device needs root on older kernels.
func TestServe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind to the loopback device")
	}
	cfg := testFiles(t)
	cfg.KernelArgs = []string{"dolly.key=k1"}
	var log syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	s, client, cfg := serveLoopback(t, cfg)

	// An ARM64 PC, with no ARM64 boot set up, gets no answer, and the
	// admin is told once (its firmware asks again and again). The BIOS
	// PC's answer after it shows both were handled.
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: cfg.DHCPPort}
	for range 2 {
		if _, err := client.WriteToUDP(clientPacket(msgRequest, 9, pxe(archEFIARM64), withCIAddr("127.0.0.101")).Marshal(), to); err != nil {
			t.Fatal(err)
		}
	}
	exchange(t, client, cfg.DHCPPort, clientPacket(msgRequest, 1, pxe(archBIOS), withCIAddr("127.0.0.100")))
	if n := strings.Count(log.String(), "level=WARN msg=\"dhcp: no boot file\""); n != 1 || !strings.Contains(log.String(), "-kernel-arm64") {
		t.Errorf("%d warnings for an ARM64 PC that asked twice, want 1 naming -kernel-arm64:\n%s", n, log.String())
	}

	// A busy port is reported as such.
	cfg2 := cfg
	cfg2.DHCPPort, cfg2.PXEPort, cfg2.TFTPPort = freePort(t, "udp"), freePort(t, "udp"), freePort(t, "udp")
	if s2, err := New(cfg2); err == nil || !strings.Contains(err.Error(), "HTTP: TCP port "+strconv.Itoa(cfg.HTTPPort)+" on 127.0.0.1 is in use") {
		if err == nil {
			s2.close()
		}
		t.Errorf("New with a busy HTTP port: %v", err)
	}

	resp := exchange(t, client, cfg.DHCPPort, clientPacket(msgRequest, 1, pxe(archEFIBC), withCIAddr("127.0.0.100")))
	if resp.MessageType() != msgAck || resp.YIAddr.String() != "127.0.0.100" || resp.File != efiName {
		t.Errorf("DHCP renewal: type %d, address %v, file %q", resp.MessageType(), resp.YIAddr, resp.File)
	}
	resp = exchange(t, client, cfg.PXEPort, clientPacket(msgRequest, 2, pxe(archBIOS), userClassIPXE))
	if resp.MessageType() != msgAck || resp.File != s.ScriptURL() || resp.YIAddr.IsValid() {
		t.Errorf("PXE request: type %d, address %v, file %q", resp.MessageType(), resp.YIAddr, resp.File)
	}

	base := "http://127.0.0.1:" + strconv.Itoa(cfg.HTTPPort)
	if s.ScriptURL() != base+"/boot.ipxe" {
		t.Errorf("script URL %s", s.ScriptURL())
	}
	script := get(t, s.ScriptURL())
	for _, want := range []string{
		"kernel " + base + "/vmlinuz initrd=initramfs dolly.server=127.0.0.1:9700 console=ttyS0,115200 console=tty0 dolly.key=k1\n",
		"initrd " + base + "/initramfs\n",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	if got := get(t, base+"/initramfs"); sha256.Sum256([]byte(got)) != fileSum(t, cfg.Initramfs) {
		t.Error("initramfs differs from the file")
	}

	if tftpSum(t, cfg.TFTPPort, biosName) != fileSum(t, cfg.BIOSFile) {
		t.Error("TFTP undionly.kpxe differs from the file")
	}
}

// An ARM64 UEFI PC is offered iPXE for ARM64 over TFTP, then the script
// for ARM64, which boots the ARM64 kernel and initramfs with the ARM64
// console; an x86-64 PC of the same server is not.
func TestServeARM64(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind to the loopback device")
	}
	cfg := testFiles(t)
	dir := t.TempDir()
	cfg.ARM64 = &ARM64Boot{
		IPXE:      writeFile(t, dir, "ipxe-arm64.efi", 21_000),
		Kernel:    writeFile(t, dir, "vmlinuz-arm64", 51_000),
		Initramfs: writeFile(t, dir, "initramfs-arm64.cpio.gz", 41_000),
	}
	s, client, cfg := serveLoopback(t, cfg)
	resp := exchange(t, client, cfg.DHCPPort, clientPacket(msgRequest, 1, pxe(archEFIARM64), withCIAddr("127.0.0.100")))
	if resp.MessageType() != msgAck || resp.File != arm64Name {
		t.Errorf("ARM64 DHCP renewal: type %d, file %q; want an ACK with %s", resp.MessageType(), resp.File, arm64Name)
	}
	resp = exchange(t, client, cfg.PXEPort, clientPacket(msgRequest, 2, pxe(archEFIARM64), userClassIPXE))
	if want := s.ScriptURL() + "?arch=arm64"; resp.File != want {
		t.Errorf("iPXE on ARM64 is told to load %q, want %q", resp.File, want)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(cfg.HTTPPort)
	script := get(t, s.ScriptURL()+"?arch=arm64")
	for _, want := range []string{"kernel " + base + "/arm64/vmlinuz initrd=initramfs dolly.server=127.0.0.1:9700 console=ttyAMA0,115200 console=tty0\n", "initrd " + base + "/arm64/initramfs\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("ARM64 script lacks %q:\n%s", want, script)
		}
	}
	if x86 := get(t, s.ScriptURL()); !strings.Contains(x86, "console=ttyS0,115200") || strings.Contains(x86, "arm64") {
		t.Errorf("x86-64 script:\n%s", x86)
	}
	for path, file := range map[string]string{"/arm64/vmlinuz": cfg.ARM64.Kernel, "/arm64/initramfs": cfg.ARM64.Initramfs} {
		if got := get(t, base+path); sha256.Sum256([]byte(got)) != fileSum(t, file) {
			t.Errorf("%s differs from %s", path, file)
		}
	}
	if tftpSum(t, cfg.TFTPPort, arm64Name) != fileSum(t, cfg.ARM64.IPXE) {
		t.Error("TFTP ipxe-arm64.efi differs from the file")
	}
}

// syncBuffer is a bytes.Buffer the services may log to while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// tftpSum fetches name over TFTP from the server at port and returns its
// sha256.
func tftpSum(t *testing.T, port int, name string) [32]byte {
	t.Helper()
	c, err := tftp.NewClient("127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	wt, err := c.Receive(name, "octet")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := wt.WriteTo(h); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
