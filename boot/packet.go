package boot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// DHCP option codes used here (RFC 2132, RFC 4578, iPXE).
const (
	optPad           = 0
	optSubnetMask    = 1
	optRouter        = 3
	optBroadcast     = 28
	optVendorSpec    = 43
	optRequestedIP   = 50
	optLeaseTime     = 51
	optMessageType   = 53
	optServerID      = 54
	optRenewalTime   = 58
	optRebindingTime = 59
	optVendorClass   = 60
	optUserClass     = 77
	optClientArch    = 93
	optClientUUID    = 97
	optIPXE          = 175
	optEnd           = 255
)

// DHCP message types (option 53).
const (
	msgDiscover = 1
	msgOffer    = 2
	msgRequest  = 3
	msgDecline  = 4
	msgAck      = 5
	msgNak      = 6
	msgRelease  = 7
)

const (
	opRequest = 1
	opReply   = 2

	headerLen = 236 // fixed BOOTP header, before the magic cookie
	minLen    = 300 // BOOTP's minimum; some PXE ROMs drop shorter replies

	flagBroadcast = 0x8000
)

var magicCookie = [4]byte{99, 130, 83, 99}

// Packet is a DHCPv4 message (RFC 2131). Addresses are IPv4; the zero
// netip.Addr stands for 0.0.0.0.
type Packet struct {
	Op     byte
	HType  byte
	HLen   byte
	Hops   byte
	XID    uint32
	Secs   uint16
	Flags  uint16
	CIAddr netip.Addr
	YIAddr netip.Addr
	SIAddr netip.Addr
	GIAddr netip.Addr
	CHAddr [16]byte
	SName  string
	File   string
	// Options maps an option code to its value. Options that appear
	// several times are concatenated (RFC 3396).
	Options map[byte][]byte
}

// ParsePacket decodes a DHCP message with dhcpv4's decoder. It reads
// nothing outside b and rejects truncated or malformed packets with an
// error. Options that appear several times are joined (RFC 3396).
func ParsePacket(b []byte) (*Packet, error) {
	if len(b) < headerLen+len(magicCookie) {
		return nil, fmt.Errorf("dhcp: packet of %d bytes is shorter than the %d-byte header", len(b), headerLen+len(magicCookie))
	}
	if hlen := b[2]; hlen > 16 {
		// dhcpv4 would cut it to 16; such a packet is no client's.
		return nil, fmt.Errorf("dhcp: hardware address length %d exceeds 16", hlen)
	}
	d, err := dhcpv4.FromBytes(b)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, errors.New("dhcp: truncated: the options end before the end option")
	}
	if err != nil {
		return nil, fmt.Errorf("dhcp: %w", err)
	}
	p := &Packet{
		Op:     byte(d.OpCode),
		HType:  byte(d.HWType),
		HLen:   byte(len(d.ClientHWAddr)),
		Hops:   d.HopCount,
		XID:    binary.BigEndian.Uint32(d.TransactionID[:]),
		Secs:   d.NumSeconds,
		Flags:  d.Flags,
		CIAddr: fromIP(d.ClientIPAddr),
		YIAddr: fromIP(d.YourIPAddr),
		SIAddr: fromIP(d.ServerIPAddr),
		GIAddr: fromIP(d.GatewayIPAddr),
		SName:  d.ServerHostName,
		File:   d.BootFileName,
		// dhcpv4.Options is a map of option code to value, ours too.
		Options: map[byte][]byte(d.Options),
	}
	copy(p.CHAddr[:], d.ClientHWAddr)
	return p, nil
}

// Marshal encodes p with dhcpv4's encoder: options in ascending order,
// long values split into several instances (RFC 3396), padded to BOOTP's
// 300 bytes, which some PXE ROMs need.
func (p *Packet) Marshal() []byte {
	d := &dhcpv4.DHCPv4{
		OpCode:         dhcpv4.OpcodeType(p.Op),
		HWType:         iana.HWType(p.HType),
		HopCount:       p.Hops,
		NumSeconds:     p.Secs,
		Flags:          p.Flags,
		ClientIPAddr:   toIP(p.CIAddr),
		YourIPAddr:     toIP(p.YIAddr),
		ServerIPAddr:   toIP(p.SIAddr),
		GatewayIPAddr:  toIP(p.GIAddr),
		ClientHWAddr:   net.HardwareAddr(p.CHAddr[:min(int(p.HLen), len(p.CHAddr))]),
		ServerHostName: p.SName,
		BootFileName:   p.File,
		Options:        dhcpv4.Options{},
	}
	binary.BigEndian.PutUint32(d.TransactionID[:], p.XID)
	for c, v := range p.Options {
		d.Options[c] = v
	}
	return d.ToBytes()
}

// fromIP is the netip form of an IPv4 header field; 0.0.0.0 is the zero
// Addr.
func fromIP(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip.To4())
	if !ok || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

// toIP is the header field of a; the zero Addr is 0.0.0.0.
func toIP(a netip.Addr) net.IP {
	if !a.Is4() {
		return net.IPv4zero.To4()
	}
	return net.IP(a.AsSlice())
}

// MAC returns the client's hardware address.
func (p *Packet) MAC() net.HardwareAddr {
	return net.HardwareAddr(slices.Clone(p.CHAddr[:p.HLen]))
}

// MessageType returns option 53, or 0 for BOOTP or a malformed option.
func (p *Packet) MessageType() byte {
	if v := p.Options[optMessageType]; len(v) == 1 {
		return v[0]
	}
	return 0
}

// optAddr returns an option holding one IPv4 address.
func (p *Packet) optAddr(code byte) (netip.Addr, bool) {
	v := p.Options[code]
	if len(v) != 4 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(v)), true
}
