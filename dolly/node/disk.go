package node

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"dolly/internal/natural"
	"dolly/internal/units"
)

// ResolveTarget turns the target a node was given into a path. Netbooted
// machines do not know their device names, so besides a path a target can
// describe a whole disk of the machine:
//
//	/dev/sda2, img/pc01.img   a path, returned as is (anything not "disk:")
//	disk:first                the first disk by name (sda < sdb < sdaa; nvme2n1 < nvme10n1)
//	disk:largest              the largest disk
//	disk:size=64MiB           the disk of exactly this size (B, KB, MB, GB, KiB, MiB, GiB, ...)
//	disk:size>=200GB          a disk at least this large (also size<=N)
//	disk:model=QEMU*          a disk whose model matches the pattern (* ? [..])
//	disk:serial=S3Z9NB0K      a disk whose serial number matches the pattern
//	disk:name=nvme*           a disk whose kernel name matches the pattern
//
// Terms combine with commas, e.g. "disk:model=Samsung*,size>=200GB,largest":
// the filters all have to hold, and "first" or "largest" picks one of the
// disks that pass. Without such a pick exactly one disk must pass; several
// are an error rather than a guess, since the disk is about to be
// overwritten.
//
// Only whole, fixed disks count: removable media, loop, ram, zram, device
// mapper, md, optical and empty devices are never chosen.
func ResolveTarget(spec string) (string, error) {
	return resolveTarget(spec, "/sys", "/dev")
}

// disk is one whole disk as sysfs shows it.
type disk struct {
	name   string // kernel name: sda, nvme0n1
	size   int64  // bytes
	model  string
	serial string
}

func (d disk) String() string {
	s := fmt.Sprintf("%s (%s", d.name, units.FormatBytes(d.size))
	if d.model != "" {
		s += ", model " + strconv.Quote(d.model)
	}
	if d.serial != "" {
		s += ", serial " + strconv.Quote(d.serial)
	}
	return s + ")"
}

// diskQuery is a parsed "disk:" spec.
type diskQuery struct {
	filters []diskFilter
	pick    string // "", "first" or "largest"
}

type diskFilter struct {
	term  string // as written, for error messages
	match func(disk) bool
}

// resolveTarget is ResolveTarget with the sysfs and /dev roots as
// parameters, so tests can use a fake tree.
func resolveTarget(spec, sysRoot, devRoot string) (string, error) {
	rest, ok := strings.CutPrefix(spec, "disk:")
	if !ok {
		return spec, nil
	}
	q, err := parseDiskQuery(rest)
	if err != nil {
		return "", fmt.Errorf("target %q: %w", spec, err)
	}
	disks, err := listDisks(filepath.Join(sysRoot, "block"))
	if err != nil {
		return "", fmt.Errorf("target %q: %w", spec, err)
	}
	if len(disks) == 0 {
		return "", fmt.Errorf("target %q: this machine has no fixed disk (are its disk drivers loaded?)", spec)
	}
	var found []disk
	for _, d := range disks {
		if q.matches(d) {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0:
		return "", fmt.Errorf("target %q: no disk matches; disks here: %s", spec, diskList(disks))
	case q.pick == "largest":
		best := found[0]
		for _, d := range found[1:] {
			if d.size > best.size {
				best = d
			}
		}
		if n := countSize(found, best.size); n > 1 {
			return "", fmt.Errorf("target %q: %d disks share the largest size %s: %s; add model=, serial= or first",
				spec, n, units.FormatBytes(best.size), diskList(found))
		}
		found = []disk{best}
	case q.pick == "first":
		found = found[:1] // listDisks sorts by name
	case len(found) > 1:
		return "", fmt.Errorf("target %q: %d disks match: %s; narrow it down (model=, serial=, size=) or add first or largest",
			spec, len(found), diskList(found))
	}
	return filepath.Join(devRoot, found[0].name), nil
}

func countSize(disks []disk, size int64) int {
	n := 0
	for _, d := range disks {
		if d.size == size {
			n++
		}
	}
	return n
}

func (q diskQuery) matches(d disk) bool {
	for _, f := range q.filters {
		if !f.match(d) {
			return false
		}
	}
	return true
}

const diskHelp = "use first, largest, size=N, size>=N, size<=N, model=PATTERN, serial=PATTERN or name=PATTERN, joined by commas"

func parseDiskQuery(s string) (diskQuery, error) {
	var q diskQuery
	if strings.TrimSpace(s) == "" {
		return q, errors.New("empty disk query: " + diskHelp)
	}
	for term := range strings.SplitSeq(s, ",") {
		term = strings.TrimSpace(term)
		switch {
		case term == "first" || term == "largest":
			if q.pick != "" {
				return q, fmt.Errorf("both %s and %s: pick one", q.pick, term)
			}
			q.pick = term
		case strings.HasPrefix(term, "size"):
			f, err := sizeFilter(term)
			if err != nil {
				return q, err
			}
			q.filters = append(q.filters, f)
		default:
			key, pattern, ok := strings.Cut(term, "=")
			var field func(disk) string
			switch key {
			case "model":
				field = func(d disk) string { return d.model }
			case "serial":
				field = func(d disk) string { return d.serial }
			case "name":
				field = func(d disk) string { return d.name }
			}
			if !ok || field == nil {
				return q, fmt.Errorf("unknown term %q: %s", term, diskHelp)
			}
			if _, err := path.Match(pattern, ""); err != nil {
				return q, fmt.Errorf("term %q: bad pattern", term)
			}
			q.filters = append(q.filters, diskFilter{term: term, match: func(d disk) bool {
				ok, _ := path.Match(pattern, field(d))
				return ok
			}})
		}
	}
	return q, nil
}

func sizeFilter(term string) (diskFilter, error) {
	var cmp func(a, b int64) bool
	var value string
	switch rest := strings.TrimPrefix(term, "size"); {
	case strings.HasPrefix(rest, ">="):
		cmp, value = func(a, b int64) bool { return a >= b }, rest[2:]
	case strings.HasPrefix(rest, "<="):
		cmp, value = func(a, b int64) bool { return a <= b }, rest[2:]
	case strings.HasPrefix(rest, "="):
		cmp, value = func(a, b int64) bool { return a == b }, rest[1:]
	default:
		return diskFilter{}, fmt.Errorf("term %q: use size=N, size>=N or size<=N", term)
	}
	n, err := units.ParseSize(value)
	if err != nil {
		return diskFilter{}, fmt.Errorf("term %q: %w", term, err)
	}
	return diskFilter{term: term, match: func(d disk) bool { return cmp(d.size, n) }}, nil
}

// listDisks reads the fixed whole disks under a /sys/block directory,
// sorted by name.
func listDisks(blockDir string) ([]disk, error) {
	entries, err := os.ReadDir(blockDir)
	if err != nil {
		return nil, fmt.Errorf("listing disks: %w", err)
	}
	var disks []disk
	for _, e := range entries {
		name := e.Name()
		if virtualDisk(name) {
			continue
		}
		dir := filepath.Join(blockDir, name)
		if readSysfs(dir, "removable") == "1" {
			continue
		}
		// The size file counts 512-byte sectors whatever the disk's
		// logical block size.
		sectors, err := strconv.ParseInt(readSysfs(dir, "size"), 10, 64)
		if err != nil || sectors == 0 {
			continue // an empty card reader or a disk that is going away
		}
		d := disk{
			name:   name,
			size:   sectors * 512,
			model:  readSysfs(dir, "device/model"),
			serial: readSysfs(dir, "device/serial"),
		}
		if d.serial == "" {
			d.serial = readSysfs(dir, "serial") // virtio_blk
		}
		disks = append(disks, d)
	}
	slices.SortFunc(disks, func(a, b disk) int { return diskOrder(a.name, b.name) })
	return disks, nil
}

// virtualDisk reports whether a block device name is one that never holds
// a machine's own data.
func virtualDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-", "md", "sr", "nbd", "fd"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func readSysfs(dir, file string) string {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// diskOrder orders disk names the way the kernel hands them out: a longer
// run of letters first comes later (sdz before sdaa, sda before nvme0n1),
// and names alike in that are in natural order (nvme2n1 before nvme10n1).
func diskOrder(a, b string) int {
	return cmp.Or(cmp.Compare(letters(a), letters(b)), natural.Compare(a, b))
}

// letters is the length of the run of letters that starts name.
func letters(name string) int {
	return len(name) - len(strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyz"))
}

func diskList(disks []disk) string {
	s := make([]string, len(disks))
	for i, d := range disks {
		s[i] = d.String()
	}
	return strings.Join(s, ", ")
}
