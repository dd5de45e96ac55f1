package initramfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeModules writes a modules directory: the named module files (with
// made-up content) and the given index files.
func fakeModules(t *testing.T, index map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range index {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for line := range strings.Lines(index["modules.dep"]) {
		mod, _, _ := strings.Cut(line, ":")
		p := filepath.Join(dir, mod)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("\x7fELF module "+mod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A NIC driver whose dependencies reach outside the chosen subtrees, a
// soft dependency, compressed modules, and modules nobody needs.
var fakeIndex = map[string]string{
	"modules.dep": `kernel/drivers/net/ethernet/realtek/r8169.ko.xz: kernel/drivers/net/phy/libphy.ko.xz kernel/drivers/net/mdio/mdio.ko.xz
kernel/drivers/net/phy/libphy.ko.xz: kernel/lib/crc/crc-deep.ko.xz
kernel/drivers/net/phy/realtek.ko.xz: kernel/drivers/net/phy/libphy.ko.xz
kernel/drivers/net/mdio/mdio.ko.xz:
kernel/lib/crc/crc-deep.ko.xz:
kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko.xz kernel/net/core/failover.ko.xz
kernel/drivers/net/net_failover.ko.xz: kernel/net/core/failover.ko.xz
kernel/net/core/failover.ko.xz:
kernel/drivers/scsi/sd_mod.ko.xz: kernel/drivers/scsi/scsi_mod.ko.xz
kernel/drivers/scsi/scsi_mod.ko.xz:
kernel/drivers/scsi/qla2xxx/qla2xxx.ko.xz: kernel/drivers/scsi/scsi_mod.ko.xz
kernel/sound/pci/snd-hda-intel.ko.xz: kernel/sound/core/snd.ko.xz
kernel/sound/core/snd.ko.xz:
kernel/fs/ext4/ext4.ko.xz:
`,
	"modules.alias": `# Aliases extracted from modules themselves.
alias pci:v000010ECd00008168sv*sd*bc*sc*i* r8169
alias virtio:d00000001v* virtio_net
alias pci:v00008086d*sv*sd*bc04sc03i00* snd_hda_intel
alias scsi:t-0x00* sd_mod
alias fs-ext4 ext4
`,
	"modules.softdep": "softdep r8169 pre: realtek\nsoftdep ext4 pre: crypto-crc32c\n",
	"modules.builtin": "kernel/drivers/virtio/virtio.ko\n",
	"modules.order":   "kernel/drivers/net/ethernet/realtek/r8169.ko\nkernel/sound/core/snd.ko\n",
}

func TestSelectModules(t *testing.T) {
	mods, err := ReadModules(fakeModules(t, fakeIndex))
	if err != nil {
		t.Fatal(err)
	}
	got, err := mods.Select([]string{
		"kernel/drivers/net/ethernet/",
		"kernel/drivers/net/virtio_net.ko",
		"kernel/drivers/scsi/*.ko",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/drivers/net/ethernet/realtek/r8169.ko.xz",
		"kernel/drivers/net/phy/libphy.ko.xz",  // dependency
		"kernel/drivers/net/phy/realtek.ko.xz", // soft dependency
		"kernel/drivers/net/mdio/mdio.ko.xz",   // dependency
		"kernel/lib/crc/crc-deep.ko.xz",        // dependency of a dependency
		"kernel/drivers/net/virtio_net.ko.xz",
		"kernel/drivers/net/net_failover.ko.xz",
		"kernel/net/core/failover.ko.xz",
		"kernel/drivers/scsi/sd_mod.ko.xz",
		"kernel/drivers/scsi/scsi_mod.ko.xz",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("selected\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	// Not chosen: HBA subtree, sound, file systems.
	for _, p := range got {
		if strings.Contains(p, "qla2xxx") || strings.Contains(p, "sound") || strings.Contains(p, "ext4") {
			t.Errorf("%s selected", p)
		}
	}

	if _, err := mods.Select([]string{"kernel/["}); err == nil {
		t.Error("bad pattern: no error")
	}
}

func TestMatchAlias(t *testing.T) {
	mods, err := ReadModules(fakeModules(t, fakeIndex))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		modalias string
		want     []string
	}{
		{"pci:v000010ECd00008168sv00001043sd00008677bc02sc00i00", []string{"r8169"}},
		{"virtio:d00000001v00001AF4", []string{"virtio_net"}},
		{"pci:v00008086d0000A0C8sv00001028sd00000A20bc04sc03i00", []string{"snd_hda_intel"}},
		{"pci:v00008086d0000A0C8sv00001028sd00000A20bc02sc00i00", nil},
		{"acpi:PNP0A03:", nil},
	}
	for _, tt := range tests {
		if got := mods.MatchAlias(tt.modalias); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.modalias, got, tt.want)
		}
	}
	if got := mods.SoftPre("r8169"); !slices.Equal(got, []string{"realtek"}) {
		t.Errorf("soft pre r8169: got %q", got)
	}
	// An alias for a module that is not there (built in) resolves to nothing.
	if got := mods.SoftPre("ext4"); len(got) != 0 {
		t.Errorf("soft pre ext4: got %q", got)
	}
	if !mods.Has("snd-hda-intel") || !mods.Has("snd_hda_intel") || mods.Has("e1000e") {
		t.Error("Has does not treat - and _ alike, or finds a module that is not there")
	}
}

func TestModuleName(t *testing.T) {
	for p, want := range map[string]string{
		"kernel/drivers/net/virtio_net.ko":      "virtio_net",
		"kernel/drivers/net/virtio_net.ko.xz":   "virtio_net",
		"kernel/lib/crc64-rocksoft.ko.zst":      "crc64_rocksoft",
		"kernel/drivers/nvme/host/nvme-core.ko": "nvme_core",
		"snd-hda-intel":                         "snd_hda_intel",
	} {
		if got := ModuleName(p); got != want {
			t.Errorf("ModuleName(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestKernelVersion(t *testing.T) {
	for k, want := range map[string]string{
		"/boot/vmlinuz-6.1.0-56-amd64": "6.1.0-56-amd64",
		"vmlinuz-6.12.9+bpo-amd64":     "6.12.9+bpo-amd64",
	} {
		if got, err := KernelVersion(k); err != nil || got != want {
			t.Errorf("KernelVersion(%q) = %q, %v; want %q", k, got, err, want)
		}
	}
	// No version in the name: the bzImage header is read.
	dir := t.TempDir()
	img := make([]byte, 0x800)
	copy(img[0x202:], "HdrS")
	img[0x20e], img[0x20f] = 0x00, 0x04 // the string is at 0x400+0x200
	copy(img[0x600:], "6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP")
	k := filepath.Join(dir, "bzImage")
	if err := os.WriteFile(k, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := KernelVersion(k); err != nil || got != "6.1.0-56-amd64" {
		t.Errorf("KernelVersion(bzImage) = %q, %v", got, err)
	}
	if err := os.WriteFile(k, make([]byte, 0x800), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := KernelVersion(k); err == nil || !strings.Contains(err.Error(), "-modules") {
		t.Errorf("not a kernel: got %v, want an error suggesting -modules", err)
	}
}

func TestNewestKernel(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"6.1.0-9-amd64", "6.10.1-1-amd64", "6.9.12-1-amd64", "6.1.0-56-amd64"} {
		if err := os.WriteFile(filepath.Join(dir, "vmlinuz-"+v), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := NewestKernel(dir)
	if err != nil || filepath.Base(got) != "vmlinuz-6.10.1-1-amd64" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := NewestKernel(t.TempDir()); err == nil {
		t.Fatal("empty dir: no error")
	}
}
