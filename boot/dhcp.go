package boot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Client architectures (option 93, RFC 4578 and IANA's registry).
const (
	archBIOS     = 0
	archEFIBC    = 7 // x86-64 UEFI, as most firmware reports it
	archEFIX8664 = 9
	archEFIARM64 = 11
)

// pxeVendorOptions is option 43 for PXE clients: PXE_DISCOVERY_CONTROL
// (tag 6) = 8, "download the boot file named in this offer", so clients
// neither show a menu nor run boot server discovery.
var pxeVendorOptions = []byte{6, 1, 8, optEnd}

// responder decides the reply to each DHCP request. It holds no sockets,
// so the decisions can be tested on their own. It is safe for concurrent
// use by the port 67 and port 4011 loops.
type responder struct {
	server    netip.Prefix // this server's address and its subnet
	router    netip.Addr   // optional, full DHCP only
	biosFile  string       // TFTP name of iPXE for BIOS clients
	efiFile   string       // TFTP name of iPXE for x86-64 UEFI clients
	arm64File string       // TFTP name of iPXE for ARM64 UEFI clients; "": not served
	scriptURL string       // what iPXE itself is told to load
	leases    *leaseTable  // nil in proxyDHCP mode
	// answer, if set, says whether to answer the machine with this MAC
	// (lower case, colons): the others get no reply at all.
	answer func(mac string) bool
	// unserved, if set, hears of every PXE client whose architecture
	// gets no boot file, even where it gets an address.
	unserved func(mac string, err error)
}

// errRangeExhausted is returned when full DHCP has no address left.
var errRangeExhausted = errors.New("dhcp range exhausted")

// errArchNotServed is returned for a PXE client whose architecture gets no
// boot file: the admin is told, once per machine, what it would take.
var errArchNotServed = errors.New("client architecture not served")

// reply returns the reply to req, which arrived on the DHCP port or, when
// pxePort is set, on the PXE boot server port 4011. A nil reply comes
// with an error saying why req gets none.
func (r *responder) reply(req *Packet, pxePort bool) (*Packet, error) {
	if req.Op != opRequest {
		return nil, fmt.Errorf("op %d is not a request", req.Op)
	}
	if req.HType != 1 || req.HLen != 6 {
		return nil, fmt.Errorf("hardware type %d, length %d: not Ethernet", req.HType, req.HLen)
	}
	mt := req.MessageType()
	if mt == 0 {
		return nil, errors.New("no DHCP message type (BOOTP is not served)")
	}
	if r.answer != nil && !r.answer(req.MAC().String()) {
		return nil, errors.New("not on the list of machines this server serves")
	}
	pxe := isPXEClient(req)
	file, fileErr := "", errors.New("not a PXE client")
	if pxe {
		file, fileErr = r.bootFile(req)
		if errors.Is(fileErr, errArchNotServed) && r.unserved != nil {
			r.unserved(req.MAC().String(), fileErr)
		}
	}

	// Port 4011 and proxyDHCP only ever give boot information.
	if pxePort || r.leases == nil {
		want := byte(msgDiscover)
		if pxePort {
			want = msgRequest
		}
		switch {
		case mt != want:
			return nil, fmt.Errorf("message type %d is not answered by proxyDHCP here", mt)
		case fileErr != nil:
			return nil, fileErr
		}
		resp := r.newReply(req, msgOffer)
		if pxePort {
			resp = r.newReply(req, msgAck)
			resp.CIAddr = req.CIAddr
		}
		r.addBoot(resp, req, file)
		return resp, nil
	}

	mac := req.MAC()
	switch mt {
	case msgDiscover:
		ip, err := r.leases.offer(mac)
		if err != nil {
			return nil, err
		}
		resp := r.leaseReply(req, msgOffer, ip)
		if fileErr == nil {
			r.addBoot(resp, req, file)
		}
		return resp, nil
	case msgRequest:
		if id, ok := req.optAddr(optServerID); ok && id != r.server.Addr() {
			return nil, fmt.Errorf("client chose server %v", id)
		}
		want, ok := req.optAddr(optRequestedIP)
		if !ok {
			want = req.CIAddr // renewing or rebinding
		}
		ip, err := r.leases.request(mac, want)
		if err != nil {
			// A NAK sends the client back to DISCOVER.
			resp := r.newReply(req, msgNak)
			resp.SIAddr = netip.Addr{}
			return resp, nil
		}
		resp := r.leaseReply(req, msgAck, ip)
		resp.CIAddr = req.CIAddr
		if fileErr == nil {
			r.addBoot(resp, req, file)
		}
		return resp, nil
	case msgRelease:
		r.leases.release(mac, req.CIAddr)
		return nil, errors.New("lease released")
	case msgDecline:
		if ip, ok := req.optAddr(optRequestedIP); ok {
			r.leases.decline(mac, ip)
		}
		return nil, errors.New("address declined")
	}
	return nil, fmt.Errorf("message type %d is not served", mt)
}

// isPXEClient reports whether req comes from PXE firmware or from iPXE.
func isPXEClient(req *Packet) bool {
	return bytes.HasPrefix(req.Options[optVendorClass], []byte("PXEClient"))
}

// isIPXE reports whether req comes from iPXE rather than the firmware.
// iPXE sends the user class "iPXE" and its own option 175.
func isIPXE(req *Packet) bool {
	_, ok := req.Options[optIPXE]
	return ok || bytes.Contains(req.Options[optUserClass], []byte("iPXE"))
}

// bootFile chooses what a PXE client loads: iPXE for its architecture
// over TFTP, or, once iPXE runs, the iPXE script over HTTP, which ends the
// chainloading loop.
func (r *responder) bootFile(req *Packet) (string, error) {
	arch := uint16(archBIOS) // option 93 is mandatory, but old ROMs omit it
	if v := req.Options[optClientArch]; len(v) >= 2 {
		arch = binary.BigEndian.Uint16(v)
	}
	var file string
	script := r.scriptURL
	switch arch {
	case archBIOS:
		file = r.biosFile
	case archEFIBC, archEFIX8664:
		file = r.efiFile
	case archEFIARM64:
		if r.arm64File == "" {
			return "", fmt.Errorf("%w: 11 (ARM64 UEFI) needs dolly-server's -kernel-arm64 and -initramfs-arm64, and iPXE for ARM64 (-ipxe-arm64)", errArchNotServed)
		}
		file, script = r.arm64File, r.scriptURL+"?arch="+arm64Arch
	default:
		return "", fmt.Errorf("%w: %d (served: x86 BIOS, x86-64 UEFI and, when set up, ARM64 UEFI)", errArchNotServed, arch)
	}
	if isIPXE(req) {
		file = script
	}
	return file, nil
}

// newReply starts a reply of type mt to req.
func (r *responder) newReply(req *Packet, mt byte) *Packet {
	return &Packet{
		Op:     opReply,
		HType:  req.HType,
		HLen:   req.HLen,
		XID:    req.XID,
		Flags:  req.Flags,
		GIAddr: req.GIAddr,
		CHAddr: req.CHAddr,
		SIAddr: r.server.Addr(),
		Options: map[byte][]byte{
			optMessageType: {mt},
			optServerID:    r.server.Addr().AsSlice(),
		},
	}
}

// leaseReply is an OFFER or ACK of address ip with the network settings.
func (r *responder) leaseReply(req *Packet, mt byte, ip netip.Addr) *Packet {
	resp := r.newReply(req, mt)
	resp.YIAddr = ip
	secs := uint32(r.leases.ttl / time.Second)
	resp.Options[optLeaseTime] = binary.BigEndian.AppendUint32(nil, secs)
	resp.Options[optRenewalTime] = binary.BigEndian.AppendUint32(nil, secs/2)
	resp.Options[optRebindingTime] = binary.BigEndian.AppendUint32(nil, secs/8*7)
	resp.Options[optSubnetMask] = net.CIDRMask(r.server.Bits(), 32)
	resp.Options[optBroadcast] = broadcastAddr(r.server).AsSlice()
	if r.router.IsValid() {
		resp.Options[optRouter] = r.router.AsSlice()
	}
	return resp
}

// addBoot adds what PXE needs to find and load the boot file.
func (r *responder) addBoot(resp, req *Packet, file string) {
	resp.SIAddr = r.server.Addr() // next-server: where TFTP runs
	resp.File = file
	resp.Options[optVendorClass] = []byte("PXEClient")
	resp.Options[optVendorSpec] = pxeVendorOptions
	if guid := req.Options[optClientUUID]; len(guid) > 0 {
		// PXE clients may ignore replies that do not echo their GUID.
		resp.Options[optClientUUID] = guid
	}
}

// broadcastAddr returns the last address of p's subnet.
func broadcastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	host := ^uint32(0) >> p.Bits()
	v := binary.BigEndian.Uint32(a[:]) | host
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, v)))
}
