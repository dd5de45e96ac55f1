package boot

import (
	"bytes"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// FuzzParsePacket feeds arbitrary bytes to the parser and what it accepts
// to both kinds of responder: nothing may panic, and an accepted packet
// must survive encoding and decoding again.
func FuzzParsePacket(f *testing.F) {
	f.Add(clientPacket(msgDiscover, 1, pxe(archEFIX8664), option175).Marshal())
	proxy := testResponder(nil)
	full := testResponder(newLeaseTable(netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.9"), time.Hour))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePacket(b)
		if err != nil {
			return
		}
		for _, r := range []*responder{proxy, full} {
			for _, pxePort := range []bool{false, true} {
				resp, err := r.reply(p, pxePort)
				if (resp == nil) == (err == nil) {
					t.Fatalf("reply = %v, %v: want a reply or a reason", resp, err)
				}
				if resp != nil {
					if _, err := ParsePacket(resp.Marshal()); err != nil {
						t.Fatalf("reply does not parse: %v", err)
					}
				}
			}
		}
		q, err := ParsePacket(p.Marshal())
		if err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		if q.XID != p.XID || q.CHAddr != p.CHAddr || q.CIAddr != p.CIAddr || !maps.EqualFunc(p.Options, q.Options, bytes.Equal) {
			t.Fatalf("round trip changed the packet:\n got %+v\nwant %+v", q, p)
		}
	})
}

// readSeed decodes a file of the fuzz corpus.
func readSeed(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/fuzz/FuzzParsePacket", name))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") {
		t.Fatalf("%s: not a fuzz corpus file", name)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return []byte(s)
}

// TestSeedCorpus checks that the checked-in packets, shaped like those of
// real firmware, get the replies they should.
func TestSeedCorpus(t *testing.T) {
	tests := []struct {
		seed    string
		pxePort bool
		proxy   string // boot file from proxyDHCP; "" for no reply
		full    bool   // full DHCP leases an address
	}{
		{"bios-discover", false, biosName, true},
		{"uefi-discover", false, efiName, true},
		{"uefi-request-4011", true, efiName, false},
		{"ipxe-discover", false, testScript, true},
		{"linux-discover", false, "", true},
	}
	for _, tt := range tests {
		p, err := ParsePacket(readSeed(t, tt.seed))
		if err != nil {
			t.Fatalf("%s: %v", tt.seed, err)
		}
		resp, err := testResponder(nil).reply(p, tt.pxePort)
		switch {
		case tt.proxy == "" && resp != nil:
			t.Errorf("%s: proxyDHCP replied", tt.seed)
		case tt.proxy != "" && err != nil:
			t.Errorf("%s: proxyDHCP: %v", tt.seed, err)
		case tt.proxy != "":
			checkBoot(t, p, resp, tt.proxy)
		}
		if !tt.full {
			continue
		}
		full := testResponder(newLeaseTable(netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.9"), time.Hour))
		resp, err = full.reply(p, false)
		if err != nil || resp.YIAddr.String() != "198.18.0.2" {
			t.Errorf("%s: full DHCP: %v, %v", tt.seed, resp, err)
		}
	}
}

// rrq is a TFTP read request for name with options (name, value pairs).
func rrq(op byte, name string, opts ...string) []byte {
	b := []byte{0, op}
	for _, s := range append([]string{name, "octet"}, opts...) {
		b = append(append(b, s...), 0)
	}
	return b
}

// FuzzTFTPRequest sends arbitrary datagrams to the TFTP server: none may
// bring it down, and afterwards it still serves its file whole. (The
// request parser is the TFTP library's; this is how it meets our server.)
func FuzzTFTPRequest(f *testing.F) {
	for _, seed := range [][]byte{
		rrq(1, biosName),
		rrq(1, "/"+efiName, "tsize", "0", "blksize", "1468"),
		rrq(1, biosName, "blksize", "99999999", "windowsize", "-1"),
		rrq(1, "../../etc/passwd"),
		rrq(2, biosName), // a write
		{0, 1, 'x'},      // no terminators
		{0, 5, 0, 1, 'e', 'r', 'r', 0},
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	bios := writeFile(f, dir, biosName, 3000)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	// Closed without a Shutdown, which would wait seconds for transfers
	// to the requests' vanished clients to time out.
	go newTFTP(map[string]string{biosName: bios}, nil, slog.New(slog.DiscardHandler)).Serve(conn)
	f.Cleanup(func() { conn.Close() })
	addr := conn.LocalAddr().String()
	want, _ := os.ReadFile(bios)
	server, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := net.DialUDP("udp4", nil, server)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.Close()
	})
	// Still serving after everything the fuzzer sent.
	c, err := tftp.NewClient(addr)
	if err != nil {
		f.Fatal(err)
	}
	wt, err := c.Receive(biosName, "octet")
	if err != nil {
		f.Fatalf("TFTP server no longer serves: %v", err)
	}
	var got bytes.Buffer
	if _, err := wt.WriteTo(&got); err != nil || !bytes.Equal(got.Bytes(), want) {
		f.Fatalf("TFTP server serves %d bytes (%v), want the file's %d", got.Len(), err, len(want))
	}
}
