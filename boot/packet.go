package boot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
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

// ParsePacket decodes a DHCP message. It reads nothing outside b and
// rejects truncated or malformed packets with an error. The sname and
// file fields are not searched for options (option 52), which PXE clients
// do not use in requests.
func ParsePacket(b []byte) (*Packet, error) {
	if len(b) < headerLen+len(magicCookie) {
		return nil, fmt.Errorf("dhcp: packet of %d bytes is shorter than the %d-byte header", len(b), headerLen+len(magicCookie))
	}
	if [4]byte(b[headerLen:headerLen+4]) != magicCookie {
		return nil, errors.New("dhcp: missing magic cookie (BOOTP, not DHCP)")
	}
	p := &Packet{
		Op:     b[0],
		HType:  b[1],
		HLen:   b[2],
		Hops:   b[3],
		XID:    binary.BigEndian.Uint32(b[4:8]),
		Secs:   binary.BigEndian.Uint16(b[8:10]),
		Flags:  binary.BigEndian.Uint16(b[10:12]),
		CIAddr: addrAt(b[12:16]),
		YIAddr: addrAt(b[16:20]),
		SIAddr: addrAt(b[20:24]),
		GIAddr: addrAt(b[24:28]),
		SName:  cString(b[44:108]),
		File:   cString(b[108:236]),
	}
	if p.HLen > 16 {
		return nil, fmt.Errorf("dhcp: hardware address length %d exceeds 16", p.HLen)
	}
	copy(p.CHAddr[:], b[28:44])
	opts, err := parseOptions(b[headerLen+4:])
	if err != nil {
		return nil, err
	}
	p.Options = opts
	return p, nil
}

// parseOptions decodes the options area up to the end option.
func parseOptions(b []byte) (map[byte][]byte, error) {
	opts := make(map[byte][]byte)
	for i := 0; i < len(b); {
		code := b[i]
		switch code {
		case optPad:
			i++
			continue
		case optEnd:
			return opts, nil
		}
		if i+1 >= len(b) {
			return nil, fmt.Errorf("dhcp: option %d truncated before its length", code)
		}
		n := int(b[i+1])
		start, end := i+2, i+2+n
		if end > len(b) {
			return nil, fmt.Errorf("dhcp: option %d claims %d bytes, %d left", code, n, len(b)-start)
		}
		opts[code] = append(opts[code], b[start:end]...)
		i = end
	}
	return nil, errors.New("dhcp: options not terminated by the end option")
}

// Marshal encodes p. The message type goes first and the other options
// follow in ascending order, so the encoding is deterministic.
func (p *Packet) Marshal() []byte {
	b := make([]byte, headerLen, minLen)
	b[0], b[1], b[2], b[3] = p.Op, p.HType, p.HLen, p.Hops
	binary.BigEndian.PutUint32(b[4:8], p.XID)
	binary.BigEndian.PutUint16(b[8:10], p.Secs)
	binary.BigEndian.PutUint16(b[10:12], p.Flags)
	putAddr(b[12:16], p.CIAddr)
	putAddr(b[16:20], p.YIAddr)
	putAddr(b[20:24], p.SIAddr)
	putAddr(b[24:28], p.GIAddr)
	copy(b[28:44], p.CHAddr[:])
	copy(b[44:107], p.SName) // leave room for the terminating NUL
	copy(b[108:235], p.File)
	b = append(b, magicCookie[:]...)

	codes := make([]byte, 0, len(p.Options))
	for c := range p.Options {
		if c != optPad && c != optEnd {
			codes = append(codes, c)
		}
	}
	slices.SortFunc(codes, func(x, y byte) int {
		switch {
		case x == y:
			return 0
		case x == optMessageType:
			return -1
		case y == optMessageType:
			return 1
		}
		return int(x) - int(y)
	})
	for _, c := range codes {
		v := p.Options[c]
		// Long values are split into several instances (RFC 3396).
		for {
			n := min(len(v), 255)
			b = append(b, c, byte(n))
			b = append(b, v[:n]...)
			v = v[n:]
			if len(v) == 0 {
				break
			}
		}
	}
	b = append(b, optEnd)
	for len(b) < minLen {
		b = append(b, optPad)
	}
	return b
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

func addrAt(b []byte) netip.Addr {
	a := netip.AddrFrom4([4]byte(b))
	if a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		copy(b, a.AsSlice())
	}
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
