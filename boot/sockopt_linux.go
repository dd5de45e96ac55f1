package boot

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenUDPDevice listens on 0.0.0.0:port, bound to the interface iface:
// it hears broadcasts from clients without an address only on iface, and
// its broadcast replies leave through iface, whatever the routing table
// says.
func listenUDPDevice(iface string, port int) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var err error
		cerr := c.Control(func(fd uintptr) {
			if err = unix.BindToDevice(int(fd), iface); err != nil {
				err = fmt.Errorf("binding to %s: %w", iface, err)
				return
			}
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
		})
		if cerr != nil {
			return cerr
		}
		return err
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}
