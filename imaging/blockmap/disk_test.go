package blockmap

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A whole disk with an EFI system partition (FAT16) and an ext4 one, both
// dirty, maps partition by partition behind an MBR or a GPT: a copy with
// what the map leaves out zeroed keeps its table, and both file systems
// check clean and give their files back.
func TestDiskMap(t *testing.T) {
	for _, tool := range []string{"sfdisk", "mkfs.fat", "mcopy", "mdel", "fsck.fat", "mke2fs", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install util-linux dosfstools mtools e2fsprogs", tool)
		}
	}
	const (
		mib                   = 1 << 20
		espStart, espSize     = 1 * mib, 32 * mib
		linuxStart, linuxSize = 34 * mib, 100 * mib
		diskSize              = 135 * mib
	)
	for _, c := range []struct{ label, want string }{
		{"gpt", "GPT disk (FAT16, ext4)"},
		{"dos", "MBR disk (FAT16, ext4)"},
	} {
		t.Run(c.label, func(t *testing.T) {
			dir := t.TempDir()
			run := func(stdin, name string, args ...string) {
				t.Helper()
				cmd := exec.Command(name, args...)
				cmd.Stdin = strings.NewReader(stdin)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s %v: %v\n%s", name, args, err, out)
				}
			}
			junkFile := func(name string, n int) (string, []byte) {
				b := make([]byte, n)
				rand.Read(b)
				p := filepath.Join(dir, name)
				os.WriteFile(p, b, 0o644)
				return p, b
			}
			// The ESP: a file copied in and deleted, one kept.
			esp := filepath.Join(dir, "esp.img")
			run("", "mkfs.fat", "-F", "16", "-C", esp, "32768")
			old, _ := junkFile("esp-old", 20*mib)
			bootPath, boot := junkFile("esp-keep", 2*mib)
			run("", "mcopy", "-i", esp, old, "::old")
			run("", "mdel", "-i", esp, "::old")
			run("", "mcopy", "-i", esp, bootPath, "::BOOTX64.EFI")
			// The root: the same.
			root := filepath.Join(dir, "root.img")
			os.WriteFile(root, nil, 0o644)
			os.Truncate(root, linuxSize)
			run("", "mke2fs", "-q", "-F", "-t", "ext4", root)
			old, _ = junkFile("root-old", 60*mib)
			homePath, home := junkFile("root-keep", 8*mib)
			for _, req := range []string{"write " + old + " old", "rm old", "write " + homePath + " keep"} {
				run("", "debugfs", "-w", "-R", req, root)
			}
			// The disk: its table, then each file system where its
			// partition lies; old data everywhere else.
			disk := filepath.Join(dir, "disk.img")
			_, junk := junkFile("disk", diskSize)
			os.WriteFile(disk, junk, 0o644)
			typ := map[string][2]string{"gpt": {"C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "0FC63DAF-8483-4772-8E79-3D69D8477DE4"}, "dos": {"ef", "83"}}[c.label]
			run("label: "+c.label+"\n"+
				"start=2048, size=65536, type="+typ[0]+"\n"+
				"start=69632, size=204800, type="+typ[1]+"\n", "sfdisk", "-q", disk)
			w, _ := os.OpenFile(disk, os.O_RDWR, 0)
			for _, fsys := range []struct {
				path string
				at   int64
			}{{esp, espStart}, {root, linuxStart}} {
				b, _ := os.ReadFile(fsys.path)
				w.WriteAt(b, fsys.at)
			}
			w.Close()
			dump := func(p string) string {
				out, _ := exec.Command("sfdisk", "-d", p).Output()
				return strings.ReplaceAll(string(out), p, "disk")
			}
			table := dump(disk)

			f, _ := os.Open(disk)
			defer f.Close()
			m, err := Read(f, diskSize)
			if err != nil {
				t.Fatal(err)
			}
			if m.FS != c.want {
				t.Errorf("mapped as %q, want %q", m.FS, c.want)
			}
			// The table, the gaps (3 MiB and the tail) and both file
			// systems' used blocks: far less than the disk.
			if used := m.UsedBytes(); used > 30*mib {
				t.Errorf("%d bytes in use of a disk holding 10 MiB of files", used)
			}
			cast := zeroFree(t, disk, m)
			if got := dump(cast); got != table {
				t.Errorf("the copy's table differs:\n%s\nwant\n%s", got, table)
			}
			data, _ := os.ReadFile(cast)
			espCopy, rootCopy := filepath.Join(dir, "esp.cast"), filepath.Join(dir, "root.cast")
			os.WriteFile(espCopy, data[espStart:espStart+espSize], 0o644)
			os.WriteFile(rootCopy, data[linuxStart:linuxStart+linuxSize], 0o644)
			run("", "fsck.fat", "-n", espCopy)
			run("", "e2fsck", "-fn", rootCopy)
			got := filepath.Join(dir, "got")
			run("", "mcopy", "-i", espCopy, "::BOOTX64.EFI", got)
			if b, _ := os.ReadFile(got); !bytes.Equal(b, boot) {
				t.Error("the ESP's file differs in the copy")
			}
			os.Remove(got)
			run("", "debugfs", "-R", "dump keep "+got, rootCopy)
			if b, _ := os.ReadFile(got); !bytes.Equal(b, home) {
				t.Error("the root's file differs in the copy")
			}
		})
	}
}

// Where a disk holds both a partition table and a file system's signature
// at its start (formatted whole, then partitioned, or the other way round),
// the map does not guess which is live; a partition that starts at the
// table itself is no partition.
func TestDiskMapAmbiguous(t *testing.T) {
	for _, tool := range []string{"sfdisk", "mke2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	const size = 64 << 20
	img := filepath.Join(t.TempDir(), "disk.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, size)
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", img).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	cmd := exec.Command("sfdisk", "-q", "--wipe", "never", img)
	cmd.Stdin = strings.NewReader("label: dos\nstart=2048, type=83\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	f, _ := os.Open(img)
	defer f.Close()
	if m, err := Read(f, size); !errors.Is(err, ErrUnknown) {
		t.Errorf("an ext4 superblock under an MBR: mapped as %q (%v), want ErrUnknown", m.FS, err)
	}

	// An MBR whose one partition starts at sector 0 (isohybrid images).
	head := make([]byte, 512)
	head[510], head[511] = 0x55, 0xAA
	e := head[446:]
	e[4] = 0x83
	binary.LittleEndian.PutUint32(e[12:], 1000)
	if m, err := Read(bytes.NewReader(append(head, make([]byte, size-512)...)), size); !errors.Is(err, ErrUnknown) {
		t.Errorf("a partition at sector 0: mapped as %q (%v), want ErrUnknown", m.FS, err)
	}
}
