package imaging

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDev is a block device in a fake sysfs.
type fakeDev struct {
	name, dev, parent string
	holders           []string
	dmName            string
}

// fakeSysfs lays out devs as the kernel does: disks under devices/block,
// partitions inside their disk's directory, and class/block linking to each.
func fakeSysfs(t *testing.T, devs []fakeDev) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, text string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "class", "block"), 0o755)
	for _, d := range devs {
		rel := filepath.Join("devices", "block", d.name)
		if d.parent != "" {
			rel = filepath.Join("devices", "block", d.parent, d.name)
			write(filepath.Join(root, rel, "partition"), "1")
		}
		write(filepath.Join(root, rel, "dev"), d.dev)
		os.MkdirAll(filepath.Join(root, rel, "holders"), 0o755)
		for _, h := range d.holders {
			write(filepath.Join(root, rel, "holders", h), "")
		}
		if d.dmName != "" {
			write(filepath.Join(root, rel, "dm", "name"), d.dmName)
		}
		if err := os.Symlink(filepath.Join("..", "..", rel), filepath.Join(root, "class", "block", d.name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCheckUseFake(t *testing.T) {
	sysfs := fakeSysfs(t, []fakeDev{
		{name: "sda", dev: "8:0"},
		{name: "sda1", dev: "8:1", parent: "sda"},
		{name: "sda2", dev: "8:2", parent: "sda"},
		{name: "sdb", dev: "8:16"},
		{name: "sdb1", dev: "8:17", parent: "sdb"},
		{name: "sdb2", dev: "8:18", parent: "sdb", holders: []string{"dm-0"}},
		{name: "dm-0", dev: "253:0", dmName: "vg-data"},
		{name: "sdc", dev: "8:32"},
		{name: "sdd", dev: "8:48"},
		{name: "sdd1", dev: "8:49", parent: "sdd"},
		{name: "sde", dev: "8:64", holders: []string{"md0"}},
		{name: "md0", dev: "9:0"},
		{name: "nvme0n1", dev: "259:0"},
		{name: "nvme0n1p1", dev: "259:1", parent: "nvme0n1"},
		{name: "nvme0n1p2", dev: "259:2", parent: "nvme0n1"},
	})
	nodes := map[string]string{
		"/dev/sda": "8:0", "/dev/sda1": "8:1", "/dev/sda2": "8:2",
		"/dev/sdb": "8:16", "/dev/sdb1": "8:17", "/dev/sdb2": "8:18", "/dev/mapper/vg-data": "253:0",
		"/dev/sdc": "8:32", "/dev/sdd": "8:48", "/dev/sdd1": "8:49", "/dev/sde": "8:64", "/dev/md0": "9:0",
		"/dev/nvme0n1": "259:0", "/dev/nvme0n1p1": "259:1", "/dev/nvme0n1p2": "259:2",
		"/dev/loop7": "7:7",
	}
	const (
		rootSda1 = "27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
		proc     = "22 27 0:21 / /proc rw,relatime shared:2 - proc proc rw\n"
		swaps    = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	)
	tests := []struct {
		name      string
		mountinfo string
		swaps     string
		target    string
		want      error  // nil: accepted
		msg       string // part of the error
	}{
		{"whole boot disk", rootSda1 + proc, swaps, "/dev/sda", ErrBootDisk,
			"target /dev/sda is the disk this machine runs from (/ is on /dev/sda1): pick another disk"},
		{"root partition", rootSda1, swaps, "/dev/sda1", ErrBootDisk, "(/ is on /dev/sda1)"},
		{"other partition of the boot disk", rootSda1, swaps, "/dev/sda2", nil, ""},
		{"other disk", rootSda1, swaps, "/dev/sdc", nil, ""},
		{"root as /dev/root", "27 1 8:1 / / rw - ext4 /dev/root rw\n", swaps, "/dev/sda", ErrBootDisk, "(/ is on /dev/sda1)"},
		{"efi partition", rootSda1 + "30 27 259:1 / /boot/efi rw - vfat /dev/nvme0n1p1 rw\n", swaps, "/dev/nvme0n1", ErrBootDisk,
			"target /dev/nvme0n1 is the disk this machine runs from (/boot/efi is on /dev/nvme0n1p1)"},
		{"btrfs root by source", "27 1 0:35 /@ / rw - btrfs /dev/sdc rw\n", swaps, "/dev/sdc", ErrBootDisk, "(/ is on /dev/sdc)"},
		{"root on LVM", "27 1 253:0 / / rw - ext4 /dev/mapper/vg-data rw\n", swaps, "/dev/sdb", ErrBootDisk,
			"(/ is on /dev/mapper/vg-data)"},
		{"overlay root", "27 1 0:50 / / rw - overlay overlay rw\n" + proc, swaps, "/dev/sda", nil, ""},
		{"mounted disk", rootSda1 + "40 27 8:32 / /mnt/data rw - ext4 /dev/sdc rw\n", swaps, "/dev/sdc", ErrTargetInUse,
			"target /dev/sdc is mounted on /mnt/data (ext4): unmount it first, or pass -force"},
		{"mount point with a space", rootSda1 + `40 27 8:32 / /mnt/my\040disk rw - ext4 /dev/sdc rw` + "\n", swaps, "/dev/sdc", ErrTargetInUse,
			"mounted on /mnt/my disk (ext4)"},
		{"mounted partition", rootSda1 + "40 27 259:2 / /home rw - xfs /dev/nvme0n1p2 rw\n", swaps, "/dev/nvme0n1", ErrTargetInUse,
			"target /dev/nvme0n1 holds /dev/nvme0n1p2, which is mounted on /home (xfs)"},
		{"mounted volume on a partition", rootSda1 + "41 27 253:0 / /srv rw - ext4 /dev/mapper/vg-data rw\n", swaps, "/dev/sdb", ErrTargetInUse,
			"target /dev/sdb holds /dev/mapper/vg-data, which is mounted on /srv (ext4)"},
		{"unknown to sysfs", rootSda1 + "42 27 7:7 / /tmp/x rw - ext4 /dev/loop7 rw\n", swaps, "/dev/loop7", ErrTargetInUse, "mounted on /tmp/x"},
		{"held partition", rootSda1, swaps, "/dev/sdb2", ErrTargetInUse,
			"target /dev/sdb2 is held by /dev/mapper/vg-data, a device-mapper, LVM or RAID device: stop it first, or pass -force"},
		{"disk with a held partition", rootSda1, swaps, "/dev/sdb", ErrTargetInUse, "held by /dev/mapper/vg-data (on /dev/sdb2)"},
		{"free partition next to a held one", rootSda1, swaps, "/dev/sdb1", nil, ""},
		{"RAID member", rootSda1, swaps, "/dev/sde", ErrTargetInUse, "held by /dev/md0"},
		{"swap partition", rootSda1, swaps + "/dev/sdd1                               partition\t4194300\t\t0\t\t-2\n", "/dev/sdd", ErrTargetInUse,
			"target /dev/sdd holds /dev/sdd1, which is in use as swap: run swapoff /dev/sdd1 first"},
		{"swap file", rootSda1, swaps + "/swapfile                               file\t4194300\t\t0\t\t-2\n", "/dev/sdd", nil, ""},
		{"malformed lines", "garbage\n\n1 2 3\n27 1 8:32 / /x rw -\n" + rootSda1, "", "/dev/sdc", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := machine{mountinfo: tt.mountinfo, swaps: tt.swaps, sysfs: sysfs, devNum: func(p string) string { return nodes[p] }}
			err := m.check(tt.target, nodes[tt.target])
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v; want %v containing %q", err, tt.want, tt.msg)
			}
			// -force may lift an in-use refusal, never the boot disk's; the
			// message must not offer what will not work.
			if force := strings.Contains(err.Error(), "-force"); force != (tt.want == ErrTargetInUse) {
				t.Errorf("error %q mentions -force: %v", err, force)
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/mnt/a\040b`: "/mnt/a b",
		`/tab\011x`:   "/tab\tx",
		`/back\134`:   `/back\`,
		`/short\04`:   `/short\04`,
		`/not\999`:    `/not\999`,
		`/plain`:      "/plain",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
