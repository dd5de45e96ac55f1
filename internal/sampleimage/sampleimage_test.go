package sampleimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"dolly/imaging"
)

func TestBuild(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 not installed (e2fsprogs)")
	}
	path := filepath.Join(t.TempDir(), "sample.img")
	if err := Build(t.Context(), path, Spec{Size: 64 << 20, Files: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() != 64<<20 {
		t.Fatalf("image: %v, size %d", err, st.Size())
	}
	b, _ := os.ReadFile(path)
	// ext4's superblock magic 0xEF53 at offset 1024+56.
	if b[1080] != 0x53 || b[1081] != 0xEF {
		t.Fatal("not an ext4 filesystem")
	}
	var zero, data int
	for off := 0; off < len(b); off += imaging.ZeroBlock {
		if imaging.IsZero(b[off : off+imaging.ZeroBlock]) {
			zero++
		} else {
			data++
		}
	}
	if data*4096 < 6<<20 || zero < data {
		t.Fatalf("%d data blocks, %d zero blocks: want ~8 MB of files and mostly free space", data, zero)
	}
}

// A dirty image's free space holds the deleted data: read through its
// block map it is zeros again, and the files' blocks are the same.
func TestBuildWithJunk(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (e2fsprogs)", tool)
		}
	}
	path := filepath.Join(t.TempDir(), "dirty.img")
	if err := Build(t.Context(), path, Spec{Size: 64 << 20, Files: 8 << 20, Junk: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	stored, _ := os.ReadFile(path)
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	m, err := im.ReadMap()
	if err != nil {
		t.Fatal(err)
	}
	im.UseMap(m)
	mapped := make([]byte, len(stored))
	if _, err := im.ReadAt(mapped, 0); err != nil {
		t.Fatal(err)
	}
	var junk, differ int
	for off := 0; off < len(stored); off += imaging.ZeroBlock {
		s, r := stored[off:off+imaging.ZeroBlock], mapped[off:off+imaging.ZeroBlock]
		if !imaging.IsZero(s) && imaging.IsZero(r) {
			junk++
		} else if string(s) != string(r) {
			differ++
		}
	}
	if junk*imaging.ZeroBlock < 30<<20 || differ != 0 {
		t.Errorf("%d blocks of deleted data in the free space (want ~32 MiB), %d blocks otherwise changed by the map", junk, differ)
	}
}

// NTFS and FAT32 images keep the disk's old data under a quick format:
// the map finds the files' bytes in use, and the old data in free space.
func TestBuildNTFSAndFAT32(t *testing.T) {
	for _, tc := range []struct{ fs, tool string }{{"ntfs", "mkntfs"}, {"fat32", "mkfs.fat"}} {
		t.Run(tc.fs, func(t *testing.T) {
			if _, err := exec.LookPath(tc.tool); err != nil {
				t.Skipf("%s not installed (ntfs-3g, dosfstools)", tc.tool)
			}
			const size, files, junk = 512 << 20, 64 << 20, 200 << 20
			path := filepath.Join(t.TempDir(), tc.fs+".img")
			if err := Build(t.Context(), path, Spec{Size: size, Files: files, Junk: junk, FS: tc.fs}); err != nil {
				t.Fatal(err)
			}
			im, err := imaging.OpenImage(path)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			m, err := im.ReadMap()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.EqualFold(m.FS, tc.fs) {
				t.Errorf("mapped as %s, want %s", m.FS, tc.fs)
			}
			// The files are gathered up to the budget: at least 7/8 of it.
			if used := m.UsedBytes(); used < files*7/8 || used > files*3/2 {
				t.Errorf("%d bytes in use for %d of files", used, files)
			}
			stored, _ := os.ReadFile(path)
			var old int64
			for off := int64(0); off < size; off += imaging.ZeroBlock {
				if start, _ := m.NextUsed(off); start > off && !imaging.IsZero(stored[off:off+imaging.ZeroBlock]) {
					old += imaging.ZeroBlock
				}
			}
			if old < junk/2 {
				t.Errorf("%d bytes of old data in the free space, want most of %d", old, junk)
			}
		})
	}
}
