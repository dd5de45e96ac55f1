package boot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

const testScript = "http://198.18.0.1:9701/boot.ipxe"

var serverIP = netip.MustParseAddr("198.18.0.1")

func testResponder(leases *leaseTable) *responder {
	return &responder{
		server:    netip.MustParsePrefix("198.18.0.1/24"),
		biosFile:  biosName,
		efiFile:   efiName,
		scriptURL: testScript,
		leases:    leases,
	}
}

// checkBoot checks the PXE boot information of a reply to req.
func checkBoot(t *testing.T, req, resp *Packet, file string) {
	t.Helper()
	if resp.File != file {
		t.Errorf("boot file %q, want %q", resp.File, file)
	}
	if resp.SIAddr != serverIP {
		t.Errorf("next-server %v, want %v", resp.SIAddr, serverIP)
	}
	if got := string(resp.Options[optVendorClass]); got != "PXEClient" {
		t.Errorf("option 60 = %q, want PXEClient", got)
	}
	if !bytes.Equal(resp.Options[optVendorSpec], pxeVendorOptions) {
		t.Errorf("option 43 = %x, want %x", resp.Options[optVendorSpec], pxeVendorOptions)
	}
	if !bytes.Equal(resp.Options[optClientUUID], req.Options[optClientUUID]) {
		t.Errorf("option 97 = %x, want the client's %x", resp.Options[optClientUUID], req.Options[optClientUUID])
	}
}

// checkReply checks the fields every reply to req has.
func checkReply(t *testing.T, req, resp *Packet, mt byte) {
	t.Helper()
	if resp.Op != opReply || resp.XID != req.XID || resp.CHAddr != req.CHAddr || resp.Flags != req.Flags {
		t.Errorf("reply header op %d xid %x chaddr %x flags %x does not answer the request", resp.Op, resp.XID, resp.CHAddr[:6], resp.Flags)
	}
	if resp.MessageType() != mt {
		t.Errorf("message type %d, want %d", resp.MessageType(), mt)
	}
	if id, _ := resp.optAddr(optServerID); id != serverIP && mt != msgNak {
		t.Errorf("server identifier %v, want %v", id, serverIP)
	}
}

func TestProxyDHCP(t *testing.T) {
	tests := []struct {
		name    string
		req     *Packet
		pxePort bool
		want    byte   // message type; 0 for no reply
		file    string // boot file in the reply
	}{
		{"BIOS discover", clientPacket(msgDiscover, 1, pxe(archBIOS)), false, msgOffer, biosName},
		{"UEFI discover", clientPacket(msgDiscover, 2, pxe(archEFIBC)), false, msgOffer, efiName},
		{"UEFI x86-64 discover", clientPacket(msgDiscover, 3, pxe(archEFIX8664)), false, msgOffer, efiName},
		{"no arch option", clientPacket(msgDiscover, 4, pxe(0), withOpt(optClientArch, nil)), false, msgOffer, biosName},
		{"iPXE user class", clientPacket(msgDiscover, 5, pxe(archBIOS), userClassIPXE), false, msgOffer, testScript},
		{"iPXE UEFI option 175", clientPacket(msgDiscover, 6, pxe(archEFIBC), option175), false, msgOffer, testScript},
		{"request on 4011", clientPacket(msgRequest, 7, pxe(archEFIBC), withCIAddr("198.18.0.50")), true, msgAck, efiName},
		{"iPXE request on 4011", clientPacket(msgRequest, 8, pxe(archBIOS), userClassIPXE), true, msgAck, testScript},
		{"not PXE", clientPacket(msgDiscover, 9), false, 0, ""},
		{"other vendor class", clientPacket(msgDiscover, 10, withOpt(optVendorClass, []byte("MSFT 5.0"))), false, 0, ""},
		{"ARM64 UEFI, not set up", clientPacket(msgDiscover, 11, pxe(archEFIARM64)), false, 0, ""},
		{"request on 67", clientPacket(msgRequest, 12, pxe(archBIOS)), false, 0, ""},
		{"discover on 4011", clientPacket(msgDiscover, 13, pxe(archBIOS)), true, 0, ""},
		{"release", clientPacket(msgRelease, 14, pxe(archBIOS)), false, 0, ""},
		{"BOOTP", clientPacket(msgDiscover, 15, pxe(archBIOS), withOpt(optMessageType, nil)), false, 0, ""},
		{"reply op", clientPacket(msgDiscover, 16, pxe(archBIOS), func(p *Packet) { p.Op = opReply }), false, 0, ""},
		{"not Ethernet", clientPacket(msgDiscover, 17, pxe(archBIOS), func(p *Packet) { p.HLen = 8 }), false, 0, ""},
	}
	r := testResponder(nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := r.reply(tt.req, tt.pxePort)
			if tt.want == 0 {
				if resp != nil || err == nil {
					t.Fatalf("reply = %+v, %v; want none, with a reason", resp, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkReply(t, tt.req, resp, tt.want)
			checkBoot(t, tt.req, resp, tt.file)
			if resp.YIAddr.IsValid() {
				t.Errorf("proxyDHCP handed out address %v", resp.YIAddr)
			}
			if resp.CIAddr != tt.req.CIAddr {
				t.Errorf("ciaddr %v, want the client's %v", resp.CIAddr, tt.req.CIAddr)
			}
			if _, ok := resp.Options[optLeaseTime]; ok {
				t.Error("proxyDHCP reply has a lease time")
			}
		})
	}
}

// An ARM64 UEFI PC (architecture 11) gets iPXE for ARM64 once the server
// has it, and then the script for ARM64; until then no answer, and the
// reason names the flags that set it up.
func TestARM64Clients(t *testing.T) {
	r := testResponder(nil)
	req := clientPacket(msgDiscover, 20, pxe(archEFIARM64))
	if resp, err := r.reply(req, false); resp != nil || err == nil || !strings.Contains(err.Error(), "-kernel-arm64") {
		t.Fatalf("ARM64 PC with no ARM64 boot set up: reply %+v, %v; want none, naming -kernel-arm64", resp, err)
	}
	r.arm64File = arm64Name
	for _, tt := range []struct {
		name string
		req  *Packet
		file string
	}{
		{"firmware", req, arm64Name},
		{"iPXE", clientPacket(msgDiscover, 21, pxe(archEFIARM64), userClassIPXE), testScript + "?arch=arm64"},
		{"x86-64 UEFI unchanged", clientPacket(msgDiscover, 22, pxe(archEFIX8664), userClassIPXE), testScript},
	} {
		resp, err := r.reply(tt.req, false)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		checkBoot(t, tt.req, resp, tt.file)
	}
}

// fakeClock is a settable time for the lease table.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestFullDHCP(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)}
	// The server's own address is in the range and must be skipped.
	leases := newLeaseTable(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.4"), time.Hour, serverIP)
	leases.now = clock.now
	r := testResponder(leases)
	r.router = netip.MustParseAddr("198.18.0.254")
	serverID := withOpt(optServerID, serverIP.AsSlice())
	requested := func(a string) func(*Packet) {
		return withOpt(optRequestedIP, netip.MustParseAddr(a).AsSlice())
	}

	steps := []struct {
		name    string
		req     *Packet
		advance time.Duration // of the clock before the request
		want    byte          // message type; 0 for no reply
		ip      string        // address offered or acknowledged
		file    string        // boot file, "" for none
		err     error         // with no reply, if it matters which
	}{
		{"PXE discover", clientPacket(msgDiscover, 1, pxe(archBIOS)), 0, msgOffer, "198.18.0.2", biosName, nil},
		{"same MAC again", clientPacket(msgDiscover, 1, pxe(archBIOS)), 0, msgOffer, "198.18.0.2", biosName, nil},
		{"plain client", clientPacket(msgDiscover, 2), 0, msgOffer, "198.18.0.3", "", nil},
		{"plain request", clientPacket(msgRequest, 2, requested("198.18.0.3"), serverID), 0, msgAck, "198.18.0.3", "", nil},
		{"iPXE request", clientPacket(msgRequest, 1, pxe(archBIOS), userClassIPXE, requested("198.18.0.2"), serverID), 0, msgAck, "198.18.0.2", testScript, nil},
		{"taken address", clientPacket(msgRequest, 3, requested("198.18.0.2")), 0, msgNak, "", "", nil},
		{"outside the range", clientPacket(msgRequest, 3, requested("198.18.0.9")), 0, msgNak, "", "", nil},
		{"other server chosen", clientPacket(msgRequest, 3, requested("198.18.0.4"), withOpt(optServerID, []byte{198, 18, 0, 9})), 0, 0, "", "", nil},
		{"UEFI discover", clientPacket(msgDiscover, 3, pxe(archEFIBC)), 0, msgOffer, "198.18.0.4", efiName, nil},
		{"range exhausted", clientPacket(msgDiscover, 4), 0, 0, "", "", errRangeExhausted},
		{"release", clientPacket(msgRelease, 3, withCIAddr("198.18.0.4")), 0, 0, "", "", nil},
		{"released address reused", clientPacket(msgDiscover, 4), 0, msgOffer, "198.18.0.4", "", nil},
		{"renewal", clientPacket(msgRequest, 2, withCIAddr("198.18.0.3")), 30 * time.Minute, msgAck, "198.18.0.3", "", nil},
		// Leases of .2 and .4 expire; .3 was renewed. The oldest goes.
		{"expired lease reused", clientPacket(msgDiscover, 5), 45 * time.Minute, msgOffer, "198.18.0.2", "", nil},
		{"previous owner moves", clientPacket(msgDiscover, 1, pxe(archBIOS)), 0, msgOffer, "198.18.0.4", biosName, nil},
	}
	for _, s := range steps {
		clock.t = clock.t.Add(s.advance)
		resp, err := r.reply(s.req, false)
		if s.want == 0 {
			if resp != nil || err == nil || s.err != nil && !errors.Is(err, s.err) {
				t.Fatalf("%s: reply = %+v, %v; want none, with error %v", s.name, resp, err, s.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		checkReply(t, s.req, resp, s.want)
		if got := resp.YIAddr.String(); s.ip != "" && got != s.ip {
			t.Fatalf("%s: address %s, want %s", s.name, got, s.ip)
		}
		if s.want == msgNak {
			if resp.YIAddr.IsValid() {
				t.Errorf("%s: NAK carries address %v", s.name, resp.YIAddr)
			}
			continue
		}
		if s.file != "" {
			checkBoot(t, s.req, resp, s.file)
		} else if resp.File != "" || resp.Options[optVendorClass] != nil {
			t.Errorf("%s: boot information %q for a client that is not PXE", s.name, resp.File)
		}
		if got := netip.AddrFrom4([4]byte(resp.Options[optSubnetMask])); got.String() != "255.255.255.0" {
			t.Errorf("%s: subnet mask %v", s.name, got)
		}
		if got, _ := resp.optAddr(optRouter); got != r.router {
			t.Errorf("%s: router %v, want %v", s.name, got, r.router)
		}
		if got := binary.BigEndian.Uint32(resp.Options[optLeaseTime]); got != 3600 {
			t.Errorf("%s: lease time %d s, want 3600", s.name, got)
		}
	}
}

func TestReplyAddr(t *testing.T) {
	s := &Server{cfg: Config{DHCPPort: 67, ClientPort: 68}}
	src := netip.MustParseAddrPort("198.18.0.50:68")
	bcast := "255.255.255.255:68"
	tests := []struct {
		name    string
		req     *Packet
		respMT  byte
		pxePort bool
		want    string
	}{
		{"no address yet", clientPacket(msgDiscover, 1), msgOffer, false, bcast},
		{"renewing", clientPacket(msgRequest, 1, withCIAddr("198.18.0.50")), msgAck, false, "198.18.0.50:68"},
		{"NAK", clientPacket(msgRequest, 1, withCIAddr("198.18.0.50")), msgNak, false, bcast},
		{"relayed", clientPacket(msgDiscover, 1, func(p *Packet) { p.GIAddr = netip.MustParseAddr("198.19.0.1") }), msgOffer, false, "198.19.0.1:67"},
		{"port 4011", clientPacket(msgRequest, 1), msgAck, true, src.String()},
	}
	for _, tt := range tests {
		resp := &Packet{Options: map[byte][]byte{optMessageType: {tt.respMT}}}
		if got := s.replyAddr(tt.req, resp, src, tt.pxePort).String(); got != tt.want {
			t.Errorf("%s: reply goes to %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestBroadcastAddr(t *testing.T) {
	for in, want := range map[string]string{
		"198.18.0.1/24":  "198.18.0.255",
		"198.18.5.1/15":  "198.19.255.255",
		"127.0.0.1/8":    "127.255.255.255",
		"198.18.0.7/32":  "198.18.0.7",
		"198.18.0.77/26": "198.18.0.127",
	} {
		if got := broadcastAddr(netip.MustParsePrefix(in)).String(); got != want {
			t.Errorf("broadcastAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestLeaseStaysWhileUnneeded checks that an expired lease keeps its
// address for its MAC as long as never-leased addresses remain, so a
// node that was off for a while gets its old address back.
func TestLeaseStaysWhileUnneeded(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)}
	leases := newLeaseTable(netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11"), time.Hour)
	leases.now = clock.now
	macA, macB, macC := clientPacket(0, 0xa).MAC(), clientPacket(0, 0xb).MAC(), clientPacket(0, 0xc).MAC()
	steps := []struct {
		mac     []byte
		advance time.Duration
		want    string // "" for exhausted
	}{
		{macA, 0, "198.18.0.10"},
		{macB, 2 * time.Hour, "198.18.0.11"}, // A's lease has expired, .11 is unused
		{macA, 0, "198.18.0.10"},
		{macC, 0, ""}, // both leases are current again
		{macC, 2 * time.Hour, "198.18.0.10"},
	}
	for i, s := range steps {
		clock.t = clock.t.Add(s.advance)
		got, err := leases.offer(s.mac)
		if s.want == "" {
			if !errors.Is(err, errRangeExhausted) {
				t.Errorf("step %d: offer = %v, %v; want the range exhausted", i, got, err)
			}
			continue
		}
		if err != nil || got.String() != s.want {
			t.Errorf("step %d: offer = %v, %v; want %s", i, got, err, s.want)
		}
	}
}

// A server told which machines it serves answers only them, in proxy and
// full DHCP alike.
func TestAnswersOnlyListedMachines(t *testing.T) {
	listed := func(mac string) bool { return mac == "52:54:00:00:00:01" }
	for _, leases := range []*leaseTable{nil, newLeaseTable(netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("198.18.0.110"), time.Hour, serverIP, netip.Addr{})} {
		r := testResponder(leases)
		r.answer = listed
		if resp, err := r.reply(clientPacket(msgDiscover, 1, pxe(archBIOS)), false); err != nil || resp.MessageType() != msgOffer {
			t.Errorf("listed machine: reply %v, %v; want an offer", resp, err)
		}
		resp, err := r.reply(clientPacket(msgDiscover, 2, pxe(archBIOS)), false)
		if resp != nil || err == nil || !strings.Contains(err.Error(), "not on the list") {
			t.Errorf("unlisted machine: reply %v, %v; want none, as not on the list", resp, err)
		}
	}
}
