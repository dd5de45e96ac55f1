package imaging

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrTargetInUse means the target is mounted, used as swap or held by
// another device (LVM, device-mapper, RAID) or program. An operator who is
// sure may write over it anyway (the node's -force).
var ErrTargetInUse = errors.New("target is in use")

// ErrBootDisk means the target holds the filesystem the machine runs from.
// Nothing overrides it: writing there destroys the running system mid-cast.
var ErrBootDisk = errors.New("target is the disk this machine runs from")

// useError is a refusal whose message names the thing and the fix, and
// which matches ErrTargetInUse or ErrBootDisk with errors.Is.
type useError struct {
	msg  string
	kind error
}

func (e *useError) Error() string { return e.msg }
func (e *useError) Unwrap() error { return e.kind }

func inUse(format string, a ...any) error {
	return &useError{msg: fmt.Sprintf(format, a...) + ", or pass -force to write over it anyway", kind: ErrTargetInUse}
}

// bootMounts are the mount points whose device is the system itself.
var bootMounts = []string{"/", "/boot", "/boot/efi"}

// machine is what the use checks read: the kernel's view of mounts, swap
// and block devices. CheckTargetUse reads the real one; tests build fakes.
type machine struct {
	mountinfo string // text of /proc/self/mountinfo
	swaps     string // text of /proc/swaps
	sysfs     string // root of sysfs, normally /sys
	// devNum returns the "major:minor" of the block device at path, or ""
	// when path is not a block device.
	devNum func(path string) string
}

// blockDev is one entry of /sys/class/block.
type blockDev struct {
	name    string // sda1
	dev     string // 8:1
	parent  string // the whole disk of a partition (sda), "" for a disk
	holders []string
	dmName  string // the device-mapper name of a dm-N device
}

// path names the device as people know it.
func (b *blockDev) path() string {
	if b.dmName != "" {
		return "/dev/mapper/" + b.dmName
	}
	return "/dev/" + b.name
}

// blockDevices reads /sys/class/block. A missing sysfs yields no devices:
// the checks then rely on device numbers alone.
func (m machine) blockDevices() map[string]*blockDev {
	dir := filepath.Join(m.sysfs, "class", "block")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	devs := make(map[string]*blockDev)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		b := &blockDev{name: e.Name(), dev: readLine(filepath.Join(p, "dev")), dmName: readLine(filepath.Join(p, "dm", "name"))}
		// A partition's directory lives inside its disk's.
		if _, err := os.Stat(filepath.Join(p, "partition")); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				b.parent = filepath.Base(filepath.Dir(real))
			}
		}
		if hs, err := os.ReadDir(filepath.Join(p, "holders")); err == nil {
			for _, h := range hs {
				b.holders = append(b.holders, h.Name())
			}
		}
		devs[b.name] = b
	}
	return devs
}

func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// family is every device whose data lives on the target: the target, the
// partitions of a whole disk, and whatever is built on them (LVM volumes,
// RAID arrays), keyed by device number. Writing the target destroys them all.
func family(devs map[string]*blockDev, target *blockDev) map[string]*blockDev {
	fam := map[string]*blockDev{target.dev: target}
	queue := []*blockDev{target}
	add := func(b *blockDev) {
		if b != nil && b.dev != "" && fam[b.dev] == nil {
			fam[b.dev] = b
			queue = append(queue, b)
		}
	}
	for len(queue) > 0 {
		b := queue[0]
		queue = queue[1:]
		for _, h := range b.holders {
			add(devs[h])
		}
		if b.parent == "" {
			for _, p := range devs {
				if p.parent == b.name {
					add(p)
				}
			}
		}
	}
	return fam
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	dev    string // major:minor of the filesystem
	point  string
	fstype string
	source string
}

// parseMountinfo reads the lines of /proc/self/mountinfo (see proc(5)):
// ID, parent ID, major:minor, root, mount point, options, optional fields,
// "-", type, source, super options. Malformed lines are skipped.
func parseMountinfo(text string) []mount {
	var ms []mount
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+3 {
			continue
		}
		ms = append(ms, mount{dev: f[2], point: unescapeMount(f[4]), fstype: f[sep+1], source: unescapeMount(f[sep+2])})
	}
	return ms
}

// unescapeMount undoes the octal escapes (\040 for a space) the kernel
// writes in mount points, sources and swap file names.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseSwaps returns the file names in /proc/swaps, whose first line is a
// heading.
func parseSwaps(text string) []string {
	var names []string
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue
		}
		names = append(names, unescapeMount(f[0]))
	}
	return names
}

// check refuses the block device path, whose device number is dev, when
// the machine runs from it or it is in use. The boot disk comes first: it
// is the one refusal -force does not lift.
func (m machine) check(path, dev string) error {
	devs := m.blockDevices()
	target := &blockDev{name: filepath.Base(path), dev: dev}
	for _, b := range devs {
		if b.dev == dev {
			target = b
			break
		}
	}
	fam := family(devs, target)
	// on names the member of the family a mount or swap uses, if any.
	on := func(devNums ...string) *blockDev {
		for _, d := range devNums {
			if b := fam[d]; b != nil {
				return b
			}
		}
		return nil
	}
	mounts := parseMountinfo(m.mountinfo)
	mountDevs := func(mt mount) []string {
		ds := []string{mt.dev}
		// Some filesystems (btrfs) show an anonymous device number; the
		// source names the block device then.
		if strings.HasPrefix(mt.source, "/") {
			ds = append(ds, m.devNum(mt.source))
		}
		return ds
	}
	for _, point := range bootMounts {
		for _, mt := range mounts {
			if mt.point != point {
				continue
			}
			if b := on(mountDevs(mt)...); b != nil {
				what := b.path()
				if strings.HasPrefix(mt.source, "/dev/") && mt.source != "/dev/root" {
					what = mt.source
				}
				return &useError{kind: ErrBootDisk,
					msg: fmt.Sprintf("target %s is the disk this machine runs from (%s is on %s): pick another disk", path, point, what)}
			}
		}
	}
	for _, mt := range mounts {
		b := on(mountDevs(mt)...)
		if b == nil {
			continue
		}
		if b == target {
			return inUse("target %s is mounted on %s (%s): unmount it first", path, mt.point, mt.fstype)
		}
		return inUse("target %s holds %s, which is mounted on %s (%s): unmount it first", path, b.path(), mt.point, mt.fstype)
	}
	for _, name := range parseSwaps(m.swaps) {
		b := on(m.devNum(name))
		if b == nil {
			continue
		}
		if b == target {
			return inUse("target %s is in use as swap: run swapoff %s first", path, name)
		}
		return inUse("target %s holds %s, which is in use as swap: run swapoff %s first", path, b.path(), name)
	}
	// Holders are what the kernel lets use a device exclusively: LVM,
	// device-mapper and RAID built on the target or its partitions.
	for _, b := range sortedFamily(fam) {
		if b != target && b.parent != target.name {
			continue
		}
		for _, h := range b.holders {
			name := "/dev/" + h
			if hd := devs[h]; hd != nil {
				name = hd.path()
			}
			of := ""
			if b != target {
				of = " (on " + b.path() + ")"
			}
			return inUse("target %s is held by %s%s, a device-mapper, LVM or RAID device: stop it first", path, name, of)
		}
	}
	return nil
}

// sortedFamily lists the family by name, so the first problem reported does
// not change from run to run.
func sortedFamily(fam map[string]*blockDev) []*blockDev {
	bs := make([]*blockDev, 0, len(fam))
	for _, b := range fam {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b *blockDev) int { return strings.Compare(a.name, b.name) })
	return bs
}
