package imaging

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CheckTargetUse refuses a block device that the machine runs from (its
// root, /boot or /boot/efi filesystem lives there: ErrBootDisk) or that is
// in use (mounted, swap, held by LVM, device-mapper or RAID, or opened
// exclusively by someone else: ErrTargetInUse). A whole disk is in use when
// any of its partitions is. Regular files and missing targets pass. It
// writes nothing.
func CheckTargetUse(path string) error {
	dev := blockDevNum(path)
	if dev == "" {
		return nil
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("target %s: cannot tell whether it is mounted: %w", path, err)
	}
	swaps, _ := os.ReadFile("/proc/swaps") // absent without swap support
	m := machine{mountinfo: string(mountinfo), swaps: string(swaps), sysfs: "/sys", devNum: blockDevNum}
	if err := m.check(path, dev); err != nil {
		return err
	}
	// The kernel knows users the files above do not show, such as mounts
	// in other namespaces: an exclusive open fails while any of them lasts.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EBUSY) {
		return inUse("target %s is in use by the kernel or another program (it cannot be opened exclusively): stop what uses it", path)
	}
	if err == nil {
		unix.Close(fd)
	}
	// Other open errors are InspectTarget's to report.
	return nil
}

// blockDevNum returns the "major:minor" of the block device at path, or ""
// when path is not a block device.
func blockDevNum(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return ""
	}
	return fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
}
