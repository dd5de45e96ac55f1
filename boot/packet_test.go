package boot

import (
	"bytes"
	"encoding/binary"
	"maps"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// clientPacket builds a client's message of type mt from the MAC
// 52:54:00:00:00:<last>, changed by the options.
func clientPacket(mt byte, last byte, opts ...func(*Packet)) *Packet {
	p := &Packet{
		Op: opRequest, HType: 1, HLen: 6, XID: 0x1234_5600 | uint32(last),
		Flags:   flagBroadcast,
		CHAddr:  [16]byte{0x52, 0x54, 0x00, 0x00, 0x00, last},
		Options: map[byte][]byte{optMessageType: {mt}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// pxe makes the packet come from PXE firmware of architecture arch.
func pxe(arch uint16) func(*Packet) {
	return func(p *Packet) {
		p.Options[optVendorClass] = []byte("PXEClient:Arch:00000:UNDI:002001")
		p.Options[optClientArch] = binary.BigEndian.AppendUint16(nil, arch)
		p.Options[optClientUUID] = append([]byte{0}, bytes.Repeat([]byte{0xab}, 16)...)
	}
}

func userClassIPXE(p *Packet) { p.Options[optUserClass] = []byte("iPXE") }
func option175(p *Packet)     { p.Options[optIPXE] = []byte{0x15, 0x01, 0x01} }

func withOpt(code byte, v []byte) func(*Packet) {
	return func(p *Packet) { p.Options[code] = v }
}

func withCIAddr(a string) func(*Packet) {
	return func(p *Packet) { p.CIAddr = netip.MustParseAddr(a) }
}

func TestPacketRoundTrip(t *testing.T) {
	p := clientPacket(msgDiscover, 7, pxe(7), userClassIPXE, withCIAddr("198.18.0.9"),
		withOpt(200, bytes.Repeat([]byte{'x'}, 600))) // split into three instances
	p.File = "undionly.kpxe"
	p.SName = "dolly"
	p.GIAddr = netip.MustParseAddr("198.18.1.1")
	b := p.Marshal()
	if len(b) < minLen {
		t.Errorf("encoded %d bytes, want at least %d", len(b), minLen)
	}
	q, err := ParsePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(p.Options, q.Options, bytes.Equal) {
		t.Errorf("options differ after a round trip:\n got %v\nwant %v", q.Options, p.Options)
	}
	q.Options, p.Options = nil, nil
	if !reflect.DeepEqual(p, q) {
		t.Errorf("round trip:\n got %+v\nwant %+v", q, p)
	}
	if got := q.MAC().String(); got != "52:54:00:00:00:07" {
		t.Errorf("MAC = %s", got)
	}
}

func TestParsePacketRejects(t *testing.T) {
	good := clientPacket(msgDiscover, 1, pxe(0)).Marshal()
	opts := headerLen + 4 // where the options start
	mutate := func(f func(b []byte) []byte) []byte {
		return f(bytes.Clone(good))
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter"},
		{"header only", good[:headerLen], "shorter"},
		{"no cookie", mutate(func(b []byte) []byte { b[headerLen] = 0; return b }), "cookie"},
		{"no options end", good[:opts+3], "truncated"},
		{"length missing", mutate(func(b []byte) []byte { return append(b[:opts], 60) }), "truncated"},
		{"length past end", mutate(func(b []byte) []byte { return append(b[:opts], 60, 200, 'P') }), "want 200 bytes"},
		{"long hlen", mutate(func(b []byte) []byte { b[2] = 17; return b }), "exceeds 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePacket(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParsePacket = %v, %v; want an error containing %q", p, err, tt.want)
			}
		})
	}
}

func TestParsePacketPadAndRepeats(t *testing.T) {
	b := clientPacket(msgDiscover, 1).Marshal()
	b = append(b[:headerLen+4], optPad, optPad, optMessageType, 1, msgRequest,
		optVendorClass, 3, 'P', 'X', 'E', optPad, optVendorClass, 6, 'C', 'l', 'i', 'e', 'n', 't', optEnd, 0xff, 0x01)
	p, err := ParsePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageType() != msgRequest {
		t.Errorf("message type %d, want %d", p.MessageType(), msgRequest)
	}
	if got := string(p.Options[optVendorClass]); got != "PXEClient" {
		t.Errorf("repeated option = %q, want the parts joined", got)
	}
}
