package relay

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// awaitDelivered waits until the peer's kernel has acknowledged every byte
// written to c and the end of the stream (the FIN that CloseWrite sent).
// Until then those bytes live only in this host's kernel: a node that
// powers off or reboots right after its cast would take them down with
// it, and its child would wait for an end that never comes. It gives up
// once the peer has acknowledged nothing for stall, or c is closed.
func awaitDelivered(c net.Conn, stall time.Duration) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return // not a socket: nothing is held in a kernel
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	const maxPoll = 20 * time.Millisecond
	poll := 100 * time.Microsecond
	lastOut, moved := -1, time.Now()
	for {
		var info *unix.TCPInfo
		var out int
		var serr error
		if err := rc.Control(func(fd uintptr) {
			info, serr = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO)
			if serr == nil {
				out, serr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
			}
		}); err != nil || serr != nil {
			return // closed, or not TCP: nothing to wait for
		}
		switch info.State {
		case unix.BPF_TCP_FIN_WAIT1, unix.BPF_TCP_CLOSING, unix.BPF_TCP_LAST_ACK:
			// Our FIN is out, not yet acknowledged.
		default:
			// FIN_WAIT2 or TIME_WAIT: our FIN was acknowledged, and so
			// was all before it. CLOSE: reset, nothing more will go.
			return
		}
		if lastOut < 0 || out < lastOut {
			lastOut, moved = out, time.Now()
		} else if time.Since(moved) > stall {
			return
		}
		time.Sleep(poll)
		poll = min(2*poll, maxPoll)
	}
}
