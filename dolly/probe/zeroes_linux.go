package probe

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// zeroesByWriting says whether the block device at path zeroes a range by
// writing zeros: its queue takes no write-zeroes command
// (write_zeroes_max_bytes is 0), so BLKZEROOUT writes zero pages, at the
// disk's write rate. A partition asks its disk's queue. A file (a hole is
// punched), or a device whose queue cannot be read, is taken to zero in
// place. sys is where sysfs is mounted.
func zeroesByWriting(sys, path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false
	}
	dev := fmt.Sprintf("%s/dev/block/%d:%d", sys, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	for _, knob := range []string{dev + "/queue/write_zeroes_max_bytes", dev + "/../queue/write_zeroes_max_bytes"} {
		if b, err := os.ReadFile(knob); err == nil {
			return strings.TrimSpace(string(b)) == "0"
		}
	}
	return false
}
