//go:build !linux

package dolly

import (
	"net"
	"os"
)

func canSplice(net.Conn, []net.Conn) bool { return false }

func setPipeSize(*os.File, int) {}

func (r *Relay) runSplice() error { return r.runCopy() }
