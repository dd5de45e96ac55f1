package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// A GPT disk of an ESP (FAT32) and an ext4 root, used (their free space
// holds deleted data), casts onto a disk half as large again with
// -grow-last and onto a smaller one that still holds every partition: on
// both sgdisk -v finds no problem, the backup table is at the disk's end,
// the GUIDs are the golden disk's, both file systems check clean and hold
// the golden files, and the root fills the larger disk. A disk too small
// for the partitions is refused before anything is written.
func TestWholeDiskOntoOtherSizes(t *testing.T) {
	testenv.RequireRoot(t) // resize2fs grows a file's partition through a loop device
	for _, tool := range []string{"sgdisk", "mkfs.fat", "mcopy", "fsck.fat", "mke2fs", "debugfs", "e2fsck", "resize2fs", "losetup"} {
		testenv.RequireProgram(t, tool, "gdisk, dosfstools, mtools, e2fsprogs, util-linux")
	}
	dir := t.TempDir()
	const (
		mib      = 1 << 20
		size     = 128 * mib
		espStart = 1 * mib
		espLen   = 40 * mib
		rootAt   = espStart + espLen
		rootLen  = 64 * mib
	)
	// The root: an ext4 whose free space holds a deleted file's data.
	root, kept := dirtyExt4(t, dir, rootLen, 8*mib)
	esp := filepath.Join(dir, "esp")
	testenv.Run(t, "mkfs.fat", "-F", "32", "-C", esp, fmt.Sprint(espLen/1024))
	boot := make([]byte, 3*mib)
	rand.Read(boot)
	os.WriteFile(filepath.Join(dir, "BOOTX64.EFI"), boot, 0o644)
	testenv.Run(t, "mcopy", "-i", esp, filepath.Join(dir, "BOOTX64.EFI"), "::BOOTX64.EFI")

	img := filepath.Join(dir, "disk.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, size)
	testenv.Run(t, "sgdisk", fmt.Sprintf("-n1:%d:+%dM", espStart/512, espLen/mib), "-t1:ef00", "-c1:EFI system",
		fmt.Sprintf("-n2:%d:+%dM", rootAt/512, rootLen/mib), "-t2:8300", "-c2:root", img)
	disk, _ := os.OpenFile(img, os.O_RDWR, 0)
	for _, p := range []struct {
		file string
		at   int64
	}{{esp, espStart}, {root, rootAt}} {
		b, _ := os.ReadFile(p.file)
		disk.WriteAt(b, p.at)
	}
	disk.Close()
	golden := guidsOf(t, img)

	targets := map[string]int64{"larger": size * 3 / 2, "smaller": rootAt + rootLen + 64*1024}
	var paths []string
	for _, name := range []string{"larger", "smaller"} {
		p := filepath.Join(dir, name)
		testimage.Fill(p, 0x5A, targets[name])
		paths = append(paths, p)
	}
	r := runCast(t, []string{"-image", img, "-chain", "-grow-last", "-no-probe", "-yes"}, paths, 2*time.Minute)
	out := r.server.out.String()
	if r.code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", r.code, out)
	}
	if !strings.Contains(out, "a whole disk (GPT)") {
		t.Errorf("the server does not say the image is a whole disk:\n%s", out)
	}
	for i, p := range paths {
		name := filepath.Base(p)
		if v := testenv.Run(t, "sgdisk", "-v", p); !strings.Contains(v, "No problems found") {
			t.Errorf("%s: sgdisk -v:\n%s\nnode:\n%s", name, v, r.nodes[i].out.String())
		}
		f, _ := os.Open(p)
		last := make([]byte, 8)
		f.ReadAt(last, targets[name]-512)
		f.Close()
		if string(last) != "EFI PART" {
			t.Errorf("%s: no backup GPT header in the disk's last sector", name)
		}
		if got := guidsOf(t, p); got != golden {
			t.Errorf("%s: GUIDs or names differ from the golden disk's:\n%s\nwant\n%s", name, got, golden)
		}
		ext := fmt.Sprintf("%s?offset=%d", p, rootAt)
		if v, err := exec.Command("e2fsck", "-fn", ext).CombinedOutput(); err != nil {
			t.Errorf("%s: e2fsck -fn: %v\n%s", name, err, v)
		}
		dump := filepath.Join(dir, "dump-"+name)
		testenv.Run(t, "debugfs", "-R", "dump etc/keep "+dump, ext)
		if got, _ := os.ReadFile(dump); !bytes.Equal(got, kept) {
			t.Errorf("%s: etc/keep differs from the golden file", name)
		}
		fat := fmt.Sprintf("%s@@%d", p, espStart)
		if v, err := exec.Command("fsck.fat", "-n", espOn(t, p, espStart, espLen)).CombinedOutput(); err != nil {
			t.Errorf("%s: fsck.fat -n: %v\n%s", name, err, v)
		}
		efi := filepath.Join(dir, "efi-"+name)
		testenv.Run(t, "mcopy", "-i", fat, "::BOOTX64.EFI", efi)
		if got, _ := os.ReadFile(efi); !bytes.Equal(got, boot) {
			t.Errorf("%s: BOOTX64.EFI differs from the golden file", name)
		}
		// The root grows to the backup table; on the smaller disk that is
		// a few KiB, too few for a block group of its own, and resize2fs
		// adds what a group can use.
		blocks := regexp.MustCompile(`Block count:\s+(\d+)`).FindStringSubmatch(testenv.Run(t, "dumpe2fs", "-h", ext))
		want := (targets[name] - rootAt - 33*512) / 1024
		least := want
		if name == "smaller" {
			least = rootLen/1024 + 1
		}
		if n, _ := strconv.ParseInt(blocks[1], 10, 64); n < least || n > want {
			t.Errorf("%s: the root has %d 1 KiB blocks, want %d to %d\nnode:\n%s", name, n, least, want, r.nodes[i].out.String())
		}
	}

	// Too small for the root: refused, untouched.
	small := filepath.Join(dir, "small")
	testimage.Fill(small, 0x5A, rootAt+rootLen-mib)
	before, _ := testimage.SHA256(small, -1)
	r = runCast(t, []string{"-image", img, "-chain", "-no-probe", "-yes"}, []string{small}, time.Minute)
	if r.codes[0] == 0 || !strings.Contains(r.nodes[0].out.String(), "image needs") {
		t.Errorf("a disk too small for the partitions: node exited %d:\n%s", r.codes[0], r.nodes[0].out.String())
	}
	if after, _ := testimage.SHA256(small, -1); after != before {
		t.Error("the refused disk was written")
	}

	// -grow-last asks for a whole disk.
	p := start(t, "dolly-server", "-image", root, "-grow-last", "-nodes", "1", "-listen", freePort(t), "-http", "off")
	if code := p.wait(t, 10*time.Second); code == 0 || !strings.Contains(p.out.String(), "not a whole disk") {
		t.Errorf("-grow-last on a partition's image: exit %d:\n%s", code, p.out.String())
	}
}

// guidsOf is what a cast must keep of a GPT disk: its GUID, and each
// partition's GUID, type and name.
func guidsOf(t *testing.T, disk string) string {
	t.Helper()
	out := testenv.Run(t, "sgdisk", "-p", disk) + testenv.Run(t, "sgdisk", "-i1", disk) + testenv.Run(t, "sgdisk", "-i2", disk)
	re := regexp.MustCompile(`(?m)^(Disk identifier \(GUID\)|Partition GUID code|Partition unique GUID|Partition name).*$`)
	return strings.Join(re.FindAllString(out, -1), "\n")
}

// espOn attaches the ESP of disk to a loop device, for fsck.fat.
func espOn(t *testing.T, disk string, at, n int64) string {
	t.Helper()
	dev := strings.TrimSpace(testenv.Run(t, "losetup", "--find", "--show", "--offset", fmt.Sprint(at), "--sizelimit", fmt.Sprint(n), disk))
	t.Cleanup(func() { exec.Command("losetup", "--detach", dev).Run() })
	return dev
}
