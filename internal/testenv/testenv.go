// Package testenv lets tests ask for what this machine may lack — root,
// loop devices, network namespaces, programs — and skip with a clear
// message when it is missing.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Written is how many bytes process pid has passed to write calls
// (wchar in /proc/PID/io): for a dolly node, about what it has put on its
// target. 0 when it cannot be read.
func Written(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (run the tests as root, as CI does)")
	}
}

// RequireProgram skips the test unless name is on the PATH; pkg says
// which package provides it.
func RequireProgram(t testing.TB, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("skipped: needs %s (Debian package %s)", name, pkg)
	}
}

// LoopDevice attaches file to a free loop device and detaches it when the
// test ends. It skips the test where loop devices cannot be had.
func LoopDevice(t testing.TB, file string) string {
	t.Helper()
	RequireRoot(t)
	RequireProgram(t, "losetup", "util-linux")
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		t.Skipf("skipped: no loop device available: %v: %s", err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// RemoveLoopDevice removes a detached loop device, so that the next one
// made is new: some of a loop device's settings outlive its attachments.
func RemoveLoopDevice(t testing.TB, dev string) {
	t.Helper()
	var nr int
	if _, err := fmt.Sscanf(dev, "/dev/loop%d", &nr); err != nil {
		return
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Errorf("removing %s: %v", dev, err)
		return
	}
	defer ctl.Close()
	if err := unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_REMOVE, nr); err != nil {
		t.Errorf("removing %s: %v", dev, err)
	}
}
