//go:build !linux

package boot

import (
	"net"
)

// listenUDPDevice listens on 0.0.0.0:port. Binding to one interface
// needs Linux's SO_BINDTODEVICE; elsewhere replies follow the routing
// table.
func listenUDPDevice(iface string, port int) (*net.UDPConn, error) {
	return net.ListenUDP("udp4", &net.UDPAddr{Port: port})
}
