package imaging

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"dolly/internal/testenv"
)

// mountExt4 formats dev as ext4 and mounts it on a temporary directory
// until the test ends.
func mountExt4(t *testing.T, dev string) string {
	t.Helper()
	testenv.RequireProgram(t, "mkfs.ext4", "e2fsprogs")
	testenv.Run(t, "mkfs.ext4", "-q", "-F", dev)
	dir := t.TempDir()
	if out, err := exec.Command("mount", dev, dir).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount %s here: %v: %s", dev, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

func TestCheckTargetUseMountedLoop(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "disk")
	fill(t, backing, 0, 32<<20)
	dev := testenv.LoopDevice(t, backing)
	if err := CheckTargetUse(dev); err != nil {
		t.Fatalf("an unused loop device is refused: %v", err)
	}

	// An exclusive opener shows in no table; the kernel still refuses.
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = CheckTargetUse(dev)
	unix.Close(fd)
	if !errors.Is(err, ErrTargetInUse) || !strings.Contains(err.Error(), "cannot be opened exclusively") {
		t.Fatalf("%s held open exclusively: %v; want ErrTargetInUse", dev, err)
	}

	dir := mountExt4(t, dev)
	err = CheckTargetUse(dev)
	if !errors.Is(err, ErrTargetInUse) || !strings.Contains(err.Error(), "mounted on "+dir) || !strings.Contains(err.Error(), "-force") {
		t.Fatalf("mounted %s: %v; want ErrTargetInUse naming %s and -force", dev, err, dir)
	}
	testenv.Run(t, "umount", dir)
	if err := CheckTargetUse(dev); err != nil {
		t.Fatalf("after umount: %v", err)
	}
}

// A whole disk is in use when one of its partitions is mounted.
func TestCheckTargetUseMountedPartition(t *testing.T) {
	testenv.RequireRoot(t)
	backing := filepath.Join(t.TempDir(), "disk")
	fill(t, backing, 0, 40<<20)
	writeMBR(t, backing, 2048, (32<<20)/512)
	out, err := exec.Command("losetup", "--find", "--show", "--partscan", backing).CombinedOutput()
	if err != nil {
		t.Skipf("skipped: no loop device available: %v: %s", err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "--detach", dev).Run() })
	if _, err := os.Stat(filepath.Join("/sys/class/block", filepath.Base(dev)+"p1")); err != nil {
		// Some kernels do not parse the table themselves; partx adds it.
		testenv.Run(t, "partx", "--add", dev)
	}
	part := partitionNode(t, dev, filepath.Base(dev)+"p1")
	dir := mountExt4(t, part)
	err = CheckTargetUse(dev)
	want := fmt.Sprintf("target %s holds /dev/%sp1, which is mounted on %s", dev, filepath.Base(dev), dir)
	if !errors.Is(err, ErrTargetInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("whole disk with a mounted partition: %v; want ErrTargetInUse containing %q", err, want)
	}
}

// partitionNode returns a device node for partition name of dev: the one
// in /dev, or, without udev to make it, one of its own.
func partitionNode(t *testing.T, dev, name string) string {
	t.Helper()
	if p := "/dev/" + name; blockDevNum(p) != "" {
		return p
	}
	var major, minor uint32
	num := readLine(filepath.Join("/sys/class/block", name, "dev"))
	if _, err := fmt.Sscanf(num, "%d:%d", &major, &minor); err != nil {
		t.Skipf("skipped: the kernel found no partition on %s", dev)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Skipf("skipped: cannot make a device node for %s: %v", name, err)
	}
	return p
}

// writeMBR writes a partition table with one Linux partition.
func writeMBR(t *testing.T, path string, start, sectors uint32) {
	t.Helper()
	var mbr [512]byte
	e := mbr[446:]
	e[4] = 0x83 // Linux
	binary.LittleEndian.PutUint32(e[8:], start)
	binary.LittleEndian.PutUint32(e[12:], sectors)
	mbr[510], mbr[511] = 0x55, 0xAA
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(mbr[:], 0); err != nil {
		t.Fatal(err)
	}
}

// The disk / lives on is refused, and -force cannot lift it.
func TestCheckTargetUseRootDisk(t *testing.T) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("skipped: %v", err)
	}
	var root mount
	for _, m := range parseMountinfo(string(b)) {
		if m.point == "/" {
			root = m // the last mount on / is the one in effect
		}
	}
	// The device node's name comes from sysfs: the mount source may be
	// /dev/root, and an overlay has no device at all.
	var name string
	uevent, _ := os.ReadFile(filepath.Join("/sys/dev/block", root.dev, "uevent"))
	for _, line := range strings.Split(string(uevent), "\n") {
		if v, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			name = v
		}
	}
	if name == "" {
		t.Skipf("skipped: / is on %s (%s), not a block device; the fake-machine tests cover this case", root.source, root.dev)
	}
	dev := "/dev/" + name
	if blockDevNum(dev) != root.dev {
		t.Skipf("skipped: %s is not the block device %s here", dev, root.dev)
	}
	targets := []string{dev}
	if real, err := filepath.EvalSymlinks(filepath.Join("/sys/dev/block", root.dev)); err == nil {
		if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
			targets = append(targets, "/dev/"+filepath.Base(filepath.Dir(real))) // the whole disk
		}
	}
	for _, tg := range targets {
		err := CheckTargetUse(tg)
		want := fmt.Sprintf("target %s is the disk this machine runs from (/ is on ", tg)
		if !errors.Is(err, ErrBootDisk) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "-force") {
			t.Errorf("CheckTargetUse(%s) = %v; want ErrBootDisk containing %q, without -force", tg, err, want)
		}
	}
}

func TestCheckTargetUseFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "disk.img")
	fill(t, file, 0, 4096)
	for _, p := range []string{file, filepath.Join(dir, "missing"), "/dev/null"} {
		if err := CheckTargetUse(p); err != nil {
			t.Errorf("CheckTargetUse(%s) = %v, want nil", p, err)
		}
	}
}

// TestOpenTargetClaimsTheDevice opens a loop device as a target: while it
// is open, nothing else can claim it (a mount needs the same claim), and
// once closed it is free again. A device claimed by someone else when the
// target is opened is refused then, not only when the node joined.
func TestOpenTargetClaimsTheDevice(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "disk")
	fill(t, backing, 0, 8<<20)
	dev := testenv.LoopDevice(t, backing)

	tg, err := OpenTarget(dev, 4<<20, TargetOptions{Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	if fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL, 0); !errors.Is(err, unix.EBUSY) {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("%s open as a target, claimed by another opener: %v; want EBUSY", dev, err)
	}
	if _, err := tg.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("writing the claimed target: %v", err)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL, 0)
	if err != nil {
		t.Fatalf("%s still claimed after the target closed: %v", dev, err)
	}
	_, err = OpenTarget(dev, 4<<20, TargetOptions{Direct: true})
	if !errors.Is(err, ErrTargetInUse) {
		t.Errorf("a target claimed by someone else was opened: %v; want ErrTargetInUse", err)
	}
	// -force writes it all the same, without claiming it.
	shared, err := OpenTarget(dev, 4<<20, TargetOptions{Direct: true, Shared: true})
	unix.Close(fd)
	if err != nil {
		t.Fatalf("a shared open of a claimed device: %v", err)
	}
	shared.Close()
}
