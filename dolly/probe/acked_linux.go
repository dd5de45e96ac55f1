package probe

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ackedBytes is what c's peer has acknowledged of what c sent, as the
// kernel counts it for a TCP socket (since Linux 4.1).
func ackedBytes(c net.Conn) (int64, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return 0, err
	}
	if ierr != nil {
		return 0, ierr
	}
	return int64(info.Bytes_acked), nil
}
