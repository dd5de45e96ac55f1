package wholedisk

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: needs %s (apt-get install gdisk e2fsprogs fdisk)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

const mib = 1 << 20

// gptDisk makes a 64 MiB GPT disk image: an 8 MiB ESP and a 20 MiB ext4
// partition, which ends at 29 MiB.
func gptDisk(t *testing.T) string {
	t.Helper()
	need(t, "sgdisk", "mke2fs")
	img := filepath.Join(t.TempDir(), "disk.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, 64*mib)
	run(t, "sgdisk", "-n1:2048:+8M", "-t1:ef00", "-c1:esp", "-n2:0:+20M", "-t2:8300", "-c2:root", img)
	run(t, "mke2fs", "-q", "-t", "ext4", "-E", "offset=9437184", img, "20M")
	return img
}

// copyTo writes the image to a disk of size bytes, as a cast would.
func copyTo(t *testing.T, img string, size int64) string {
	t.Helper()
	data, _ := os.ReadFile(img)
	disk := filepath.Join(t.TempDir(), "target")
	os.WriteFile(disk, data[:min(int64(len(data)), size)], 0o644)
	os.Truncate(disk, size)
	return disk
}

func guids(t *testing.T, disk string) string {
	out := run(t, "sgdisk", "-i1", disk) + run(t, "sgdisk", "-i2", disk) + run(t, "sgdisk", "-p", disk)
	return strings.Join(regexp.MustCompile(`(?m)^(Partition unique GUID|Disk identifier \(GUID\)|Partition name).*$`).FindAllString(out, -1), "\n")
}

func TestReadLayout(t *testing.T) {
	img := gptDisk(t)
	f, _ := os.Open(img)
	defer f.Close()
	l, err := Read(f, 64*mib)
	if err != nil {
		t.Fatal(err)
	}
	want := Layout{Table: "GPT", End: 29 * mib, MinSize: 29*mib + 32*512 + 512,
		Parts: []Partition{{Index: 1, Start: mib, Len: 8 * mib}, {Index: 2, Start: 9 * mib, Len: 20 * mib}}}
	if l.Table != want.Table || l.End != want.End || l.MinSize != want.MinSize || !slices.Equal(l.Parts, want.Parts) {
		t.Errorf("got %+v, want %+v", l, want)
	}
	plain := filepath.Join(t.TempDir(), "fs.img")
	os.WriteFile(plain, make([]byte, mib), 0o644)
	p, _ := os.Open(plain)
	defer p.Close()
	if _, err := Read(p, mib); !errors.Is(err, ErrNotDisk) {
		t.Errorf("a disk of zeros: got %v, want ErrNotDisk", err)
	}
}

func TestFitGPT(t *testing.T) {
	img := gptDisk(t)
	want := guids(t, img)
	tests := []struct {
		name    string
		size    int64
		grow    bool
		rootLen int64 // the ext4 partition's length after
	}{
		{"larger", 96 * mib, false, 20 * mib},
		{"larger, grown", 96 * mib, true, 96*mib - 9*mib - 33*512},
		{"smaller, every partition fits", 30 * mib, false, 20 * mib},
		{"same size, grown", 64 * mib, true, 64*mib - 9*mib - 33*512},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			disk := copyTo(t, img, tc.size)
			f, err := os.OpenFile(disk, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			fitted, err := Fit(f, 64*mib, tc.size, tc.grow)
			if err != nil {
				t.Fatal(err)
			}
			if fitted.Moved != (tc.size != 64*mib) || (fitted.Grown != nil) != tc.grow {
				t.Errorf("fitted %+v", fitted)
			}
			f.Close()
			if tc.grow {
				if os.Geteuid() != 0 {
					t.Skip("skipped: growing a file system in a file needs a loop device: run as root")
				}
				if _, err := GrowFileSystem(context.Background(), disk, *fitted.Grown); err != nil {
					t.Fatal(err)
				}
			}
			if st, _ := os.Stat(disk); st.Size() != tc.size {
				t.Errorf("the disk is %d bytes, not %d", st.Size(), tc.size)
			}
			if out := run(t, "sgdisk", "-v", disk); !strings.Contains(out, "No problems found") {
				t.Errorf("sgdisk -v:\n%s", out)
			}
			if got := guids(t, disk); got != want {
				t.Errorf("GUIDs or names changed:\n%s\nwant\n%s", got, want)
			}
			info := run(t, "sgdisk", "-i2", disk)
			if m := regexp.MustCompile(`Partition size: (\d+) sectors`).FindStringSubmatch(info); m == nil || m[1] != itoa(tc.rootLen/512) {
				t.Errorf("root partition: %v sectors, want %d", m, tc.rootLen/512)
			}
			root := disk + "?offset=9437184"
			run(t, "e2fsck", "-fn", root)
			blocks := regexp.MustCompile(`Block count:\s+(\d+)`).FindStringSubmatch(run(t, "dumpe2fs", "-h", root))
			if blocks == nil || blocks[1] != itoa(tc.rootLen/1024) {
				t.Errorf("ext4 has %v 1 KiB blocks, want %d", blocks, tc.rootLen/1024)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestFitRefusesASmallDisk(t *testing.T) {
	img := gptDisk(t)
	disk := copyTo(t, img, 29*mib)
	before, _ := os.ReadFile(disk)
	f, _ := os.OpenFile(disk, os.O_RDWR, 0)
	defer f.Close()
	if _, err := Fit(f, 64*mib, 29*mib, false); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("got %v, want too small", err)
	}
	if after, _ := os.ReadFile(disk); string(after) != string(before) {
		t.Error("a refused disk was changed")
	}
}

func TestFitMBR(t *testing.T) {
	need(t, "sfdisk")
	img := filepath.Join(t.TempDir(), "mbr.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, 32*mib)
	cmd := exec.Command("sfdisk", "-q", img)
	cmd.Stdin = strings.NewReader("label: dos\nstart=2048, size=8192, type=c\nstart=10240, size=20480, type=83\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	f, _ := os.Open(img)
	l, err := Read(f, 32*mib)
	f.Close()
	if err != nil || l.Table != "MBR" || l.MinSize != 30720*512 {
		t.Fatalf("layout %+v, %v", l, err)
	}
	disk := copyTo(t, img, 48*mib)
	d, _ := os.OpenFile(disk, os.O_RDWR, 0)
	fitted, err := Fit(d, 32*mib, 48*mib, true)
	d.Close()
	if err != nil || fitted.Grown == nil || fitted.Grown.Index != 2 {
		t.Fatalf("fitted %+v, %v", fitted, err)
	}
	if out := run(t, "sfdisk", "-d", disk); !strings.Contains(out, "start=       10240, size=       88064, type=83") {
		t.Errorf("sfdisk -d:\n%s", out)
	}
}

// An MBR disk that ends in an extended partition is fitted without growing
// it: its logical partitions are not grown, and nothing fails.
func TestFitMBRExtendedLast(t *testing.T) {
	need(t, "sfdisk")
	img := filepath.Join(t.TempDir(), "mbr.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, 32*mib)
	cmd := exec.Command("sfdisk", "-q", img)
	cmd.Stdin = strings.NewReader("label: dos\nstart=2048, size=8192, type=83\nstart=10240, size=20480, type=5\nstart=12288, size=8192, type=82\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	f, _ := os.Open(img)
	l, err := Read(f, 32*mib)
	f.Close()
	if err != nil || !l.LastExtended {
		t.Fatalf("layout %+v, %v: want the extended partition last", l, err)
	}
	before := run(t, "sfdisk", "-d", img)
	disk := copyTo(t, img, 48*mib)
	d, _ := os.OpenFile(disk, os.O_RDWR, 0)
	fitted, err := Fit(d, 32*mib, 48*mib, true)
	d.Close()
	if err != nil || fitted.Grown != nil {
		t.Fatalf("fitted %+v, %v: want nothing grown, no error", fitted, err)
	}
	if after := run(t, "sfdisk", "-d", disk); strings.ReplaceAll(after, disk, img) != before {
		t.Errorf("the table changed:\n%s\nwant\n%s", after, before)
	}
}
