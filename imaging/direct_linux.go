package imaging

import (
	"os"

	"golang.org/x/sys/unix"
)

// errDirectRefused is what a direct write fails with when the target
// does not take O_DIRECT at this alignment.
var errDirectRefused = unix.EINVAL

// openDirect opens path for writing with O_DIRECT, or returns nil where the
// target does not allow it.
func openDirect(path string) *os.File {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return f
}
