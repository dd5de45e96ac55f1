package boot

import (
	"context"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
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

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T, network string) int {
	t.Helper()
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
	return n
}

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
	s, client, cfg := serveLoopback(t, cfg)

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

	c, err := tftp.NewClient("127.0.0.1:" + strconv.Itoa(cfg.TFTPPort))
	if err != nil {
		t.Fatal(err)
	}
	wt, err := c.Receive(biosName, "octet")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := wt.WriteTo(h); err != nil {
		t.Fatal(err)
	}
	if [32]byte(h.Sum(nil)) != fileSum(t, cfg.BIOSFile) {
		t.Error("TFTP undionly.kpxe differs from the file")
	}
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

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
