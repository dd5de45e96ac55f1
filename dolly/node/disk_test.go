package node

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fakeDisk is one /sys/block entry of a fake sysfs tree.
type fakeDisk struct {
	name      string
	sectors   int64
	removable bool
	model     string
	serial    string // device/serial (SCSI, NVMe)
	vserial   string // serial (virtio_blk)
}

func fakeSys(t *testing.T, disks ...fakeDisk) string {
	t.Helper()
	root := t.TempDir()
	write := func(dir, file, content string) {
		t.Helper()
		p := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range disks {
		dir := filepath.Join(root, "block", d.name)
		write(dir, "size", strconv.FormatInt(d.sectors, 10))
		removable := "0"
		if d.removable {
			removable = "1"
		}
		write(dir, "removable", removable)
		if d.model != "" {
			// SCSI pads the model with blanks.
			write(dir, "device/model", d.model+"    ")
		}
		if d.serial != "" {
			write(dir, "device/serial", d.serial)
		}
		if d.vserial != "" {
			write(dir, "serial", d.vserial)
		}
	}
	return root
}

const gib = 1 << 30 / 512 // sectors

var lab = []fakeDisk{
	{name: "sdb", sectors: 500 * gib, model: "Samsung SSD 870", serial: "S6PNNS0T"},
	{name: "sda", sectors: 250 * gib, model: "Samsung SSD 860", serial: "S3Z9NB0K"},
	{name: "sdaa", sectors: 100 * gib, model: "WDC WD10", serial: "WD-1"},
	{name: "nvme0n1", sectors: 1000 * gib, model: "WD Blue SN570", serial: "22145Z"},
	{name: "vda", sectors: 64 << 20 / 512, vserial: "ABC123"},
	{name: "sdc", sectors: 32 * gib, removable: true, model: "USB Stick"},
	{name: "loop0", sectors: 8 * gib},
	{name: "zram0", sectors: 4 * gib},
	{name: "ram0", sectors: 8192},
	{name: "sr0", sectors: 0, model: "DVD-ROM"},
	{name: "mmcblk0", sectors: 0}, // an empty card reader
}

func TestResolveTarget(t *testing.T) {
	sys := fakeSys(t, lab...)
	tests := []struct {
		spec string
		want string
	}{
		{"/dev/sda2", "/dev/sda2"},
		{"img/pc01.img", "img/pc01.img"},
		{"disk:first", "/dev/sda"},
		{"disk:largest", "/dev/nvme0n1"},
		{"disk:size=64MiB", "/dev/vda"},
		{"disk:size>=400GiB,first", "/dev/sdb"},
		{"disk:size<=100GiB,largest", "/dev/sdaa"},
		{"disk:model=QEMU*,first", ""}, // no match: error
		{"disk:model=Samsung*,largest", "/dev/sdb"},
		{"disk:model=Samsung SSD 860", "/dev/sda"},
		{"disk:serial=ABC123", "/dev/vda"},
		{"disk:serial=S6PN*", "/dev/sdb"},
		{"disk:name=nvme*", "/dev/nvme0n1"},
		{"disk: model=WD*, size>=500GB", "/dev/nvme0n1"},
	}
	for _, tt := range tests {
		got, err := resolveTarget(tt.spec, sys, "/dev")
		if tt.want == "" {
			if err == nil {
				t.Errorf("%q: got %q, want an error", tt.spec, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: got %q, %v; want %q", tt.spec, got, err, tt.want)
		}
	}
}

func TestResolveTargetErrors(t *testing.T) {
	sys := fakeSys(t, lab...)
	tests := []struct {
		spec string
		want []string // in the error
	}{
		// Ambiguity is an error, and the error lists the candidates.
		{"disk:model=Samsung*", []string{"2 disks match", "sda (268.4 GB", "sdb (536.9 GB", "first or largest"}},
		// No match lists what there is, but not what never counts.
		{"disk:size=1TB", []string{"no disk matches", "nvme0n1", "vda", `serial "ABC123"`}},
		{"disk:serial=nope", []string{"no disk matches"}},
		{"disk:", []string{"empty disk query"}},
		{"disk:biggest", []string{`unknown term "biggest"`, "largest"}},
		{"disk:first,largest", []string{"pick one"}},
		{"disk:size=lots", []string{`term "size=lots"`}},
		{"disk:size~1GB", []string{"size>=N"}},
		{"disk:model=[", []string{"bad pattern"}},
	}
	for _, tt := range tests {
		_, err := resolveTarget(tt.spec, sys, "/dev")
		if err == nil {
			t.Errorf("%q: no error", tt.spec)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", tt.spec, err, w)
			}
		}
		for _, never := range []string{"loop0", "zram0", "sdc", "sr0"} {
			if strings.Contains(err.Error(), never+" ") {
				t.Errorf("%q: error %q lists %s", tt.spec, err, never)
			}
		}
	}
}

func TestResolveTargetLargestTie(t *testing.T) {
	sys := fakeSys(t,
		fakeDisk{name: "sda", sectors: 100 * gib},
		fakeDisk{name: "sdb", sectors: 100 * gib},
	)
	if got, err := resolveTarget("disk:largest", sys, "/dev"); err == nil {
		t.Fatalf("two disks of the same size: got %q, want an error", got)
	}
	if got, err := resolveTarget("disk:first", sys, "/dev"); err != nil || got != "/dev/sda" {
		t.Fatalf("disk:first: got %q, %v", got, err)
	}
}

func TestResolveTargetNoDisks(t *testing.T) {
	sys := fakeSys(t, fakeDisk{name: "loop0", sectors: 8})
	_, err := resolveTarget("disk:first", sys, "/dev")
	if err == nil || !strings.Contains(err.Error(), "no fixed disk") {
		t.Fatalf("got %v, want a no fixed disk error", err)
	}
	if _, err := resolveTarget("disk:first", filepath.Join(sys, "missing"), "/dev"); err == nil {
		t.Fatal("missing sysfs: no error")
	}
}

func TestDiskOrder(t *testing.T) {
	names := []string{"sdaa", "nvme10n1", "sdb", "vda", "nvme2n1", "sda", "sdz", "nvme0n1"}
	slices.SortFunc(names, diskOrder)
	want := []string{"sda", "sdb", "sdz", "vda", "nvme0n1", "nvme2n1", "nvme10n1", "sdaa"}
	if !slices.Equal(names, want) {
		t.Fatalf("got %v, want %v", names, want)
	}
}
