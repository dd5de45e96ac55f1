package blockmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// needTools skips the test where e2fsprogs is missing.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install e2fsprogs", tool)
		}
	}
}

// mkfs makes a file system of size bytes in a file, with some files in it.
func mkfs(t *testing.T, size int64, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	content := filepath.Join(dir, "content")
	os.MkdirAll(filepath.Join(content, "sub"), 0o755)
	for i, n := range []int{1, 5000, 70000, 3 << 20} {
		data := bytes.Repeat([]byte(fmt.Sprintf("file %d ", i)), n/7+1)[:n]
		if err := os.WriteFile(filepath.Join(content, "sub", fmt.Sprintf("f%d", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("mke2fs", append(append([]string{"-q", "-F", "-d", content}, args...), img)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mke2fs %v: %v\n%s", args, err, out)
	}
	return img
}

var freeLine = regexp.MustCompile(`^\s+Free blocks: (.*)$`)

// dumpe2fsUsed is the set of blocks e2fsprogs counts in use, from the free
// ranges dumpe2fs lists per group, and the block count.
func dumpe2fsUsed(t *testing.T, img string) (used []bool, blockSize int64, uninit bool) {
	t.Helper()
	out, err := exec.Command("dumpe2fs", img).Output()
	if err != nil {
		t.Fatalf("dumpe2fs: %v", err)
	}
	var blocks int64
	var free [][2]int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Block count:"); ok {
			blocks, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "Block size:"); ok {
			blockSize, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		m := freeLine.FindStringSubmatch(line)
		if m == nil || strings.TrimSpace(m[1]) == "" {
			continue
		}
		for _, r := range strings.Split(m[1], ", ") {
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.ParseInt(lo, 10, 64)
			b, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("dumpe2fs free range %q", r)
			}
			free = append(free, [2]int64{a, b})
		}
	}
	if blocks == 0 || blockSize == 0 {
		t.Fatalf("dumpe2fs gave no block count or size:\n%s", out)
	}
	used = make([]bool, blocks)
	for i := range used {
		used[i] = true
	}
	for _, r := range free {
		for b := r[0]; b <= r[1]; b++ {
			used[b] = false
		}
	}
	return used, blockSize, bytes.Contains(out, []byte("BLOCK_UNINIT"))
}

// The map of an ext file system is the blocks e2fsprogs counts in use,
// exactly, across the layouts mke2fs makes.
func TestExtMapMatchesE2fsprogs(t *testing.T) {
	needTools(t, "mke2fs", "dumpe2fs")
	sawUninit := false
	for _, c := range []struct {
		name string
		size int64
		args []string
	}{
		// Several groups of 128 MiB, the empty ones left BLOCK_UNINIT.
		{"ext4", 600 << 20, []string{"-t", "ext4"}},
		{"ext4 one group", 64 << 20, []string{"-t", "ext4"}},
		{"ext4 1 KiB blocks", 32 << 20, []string{"-t", "ext4", "-b", "1024"}},
		{"ext4 64bit", 600 << 20, []string{"-t", "ext4", "-O", "64bit"}},
		{"ext4 no flex_bg", 600 << 20, []string{"-t", "ext4", "-O", "^flex_bg"}},
		{"ext4 uninit_bg, no metadata_csum", 600 << 20, []string{"-t", "ext4", "-O", "^metadata_csum,uninit_bg"}},
		{"ext4 no uninit_bg", 600 << 20, []string{"-t", "ext4", "-O", "^metadata_csum,^uninit_bg"}},
		{"ext4 small groups", 48 << 20, []string{"-t", "ext4", "-g", "1024", "-N", "4096"}},
		{"ext3", 40 << 20, []string{"-t", "ext3"}},
		{"ext2", 24 << 20, []string{"-t", "ext2"}},
		{"ext2 not sparse_super", 24 << 20, []string{"-t", "ext2", "-O", "^sparse_super,^resize_inode"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := mkfs(t, c.size, c.args...)
			want, blockSize, uninit := dumpe2fsUsed(t, img)
			sawUninit = sawUninit || uninit
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := Read(f, c.size)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if m.BlockSize != blockSize || m.Size != c.size {
				t.Fatalf("block size %d, size %d; want %d, %d", m.BlockSize, m.Size, blockSize, c.size)
			}
			got := make([]bool, len(want))
			for _, e := range m.Used {
				if e.Off%blockSize != 0 || e.Len%blockSize != 0 {
					t.Fatalf("extent %+v is not whole blocks", e)
				}
				for b := e.Off / blockSize; b < e.End()/blockSize && b < int64(len(got)); b++ {
					got[b] = true
				}
			}
			var diff []string
			for b := range want {
				if got[b] != want[b] && len(diff) < 10 {
					diff = append(diff, fmt.Sprintf("block %d: map %v, e2fsprogs %v", b, got[b], want[b]))
				}
			}
			if len(diff) > 0 {
				t.Errorf("%s: the map differs from dumpe2fs:\n%s", m.FS, strings.Join(diff, "\n"))
			}
			if used := m.UsedBytes(); used <= 0 || used >= c.size/2 {
				t.Errorf("%d of %d bytes in use: a fresh file system with a few MB of files", used, c.size)
			}
		})
	}
	if !sawUninit {
		t.Error("no layout had a BLOCK_UNINIT group: the test does not try the map's placing of their metadata")
	}
}

// Images that are not an ext file system, or one the map cannot trust,
// are said so.
func TestExtMapRefuses(t *testing.T) {
	needTools(t, "mke2fs", "debugfs")
	dense := filepath.Join(t.TempDir(), "dense")
	os.WriteFile(dense, bytes.Repeat([]byte{0x5a}, 1<<20), 0o644)
	f, _ := os.Open(dense)
	defer f.Close()
	if _, err := Read(f, 1<<20); !errors.Is(err, ErrUnknown) {
		t.Errorf("bytes with no file system: %v, want ErrUnknown", err)
	}

	// A file system not cleanly unmounted: its state says so.
	img := mkfs(t, 16<<20, "-t", "ext4")
	if out, err := exec.Command("debugfs", "-w", "-R", "ssv state 0", img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v\n%s", err, out)
	}
	g, _ := os.Open(img)
	defer g.Close()
	if _, err := Read(g, 16<<20); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "e2fsck") {
		t.Errorf("a dirty ext4: %v, want ErrDirty saying to run e2fsck", err)
	}

	// Cleanly unmounted, but with errors the kernel found in it.
	img = mkfs(t, 16<<20, "-t", "ext4")
	if out, err := exec.Command("debugfs", "-w", "-R", "ssv state 3", img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v\n%s", err, out)
	}
	e, _ := os.Open(img)
	defer e.Close()
	if _, err := Read(e, 16<<20); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "errors") {
		t.Errorf("an ext4 with errors: %v, want ErrDirty saying so", err)
	}

	// Cut short: the file system is larger than the image.
	h, _ := os.Open(mkfs(t, 16<<20, "-t", "ext4"))
	defer h.Close()
	if _, err := Read(h, 8<<20); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("an image cut short: %v", err)
	}
}

func TestNextUsed(t *testing.T) {
	m := Map{Size: 100, Used: []Extent{{0, 10}, {20, 5}, {90, 10}}}
	for _, c := range []struct{ off, start, end int64 }{
		{0, 0, 10}, {5, 5, 10}, {10, 20, 25}, {24, 24, 25}, {25, 90, 100}, {99, 99, 100}, {100, 100, 100},
	} {
		if s, e := m.NextUsed(c.off); s != c.start || e != c.end {
			t.Errorf("NextUsed(%d) = %d, %d; want %d, %d", c.off, s, e, c.start, c.end)
		}
	}
	if (Map{Size: 50}).UsedBytes() != 0 || m.UsedBytes() != 25 {
		t.Error("UsedBytes")
	}
}
