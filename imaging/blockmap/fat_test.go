package blockmap

import (
	"bytes"
	"crypto/rand"
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

// zeroFree writes a copy of img with every byte m leaves out zeroed: what
// a target holds after a cast through the map.
func zeroFree(t *testing.T, img string, m Map) string {
	t.Helper()
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(data))
	for _, e := range m.Used {
		copy(out[e.Off:e.End()], data[e.Off:e.End()])
	}
	p := img + ".cast"
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var bytesFree = regexp.MustCompile(`([0-9 ]+) bytes free`)

// A dirty FAT volume maps to its used clusters, as many as mtools counts,
// and a copy with the free ones zeroed checks clean and holds its files.
func TestFATMap(t *testing.T) {
	for _, tool := range []string{"mkfs.fat", "mcopy", "mdel", "mdir", "fsck.fat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install dosfstools mtools", tool)
		}
	}
	for _, c := range []struct {
		fat, kind string
		kib       int
	}{
		{"12", "FAT12", 4 << 10},
		{"16", "FAT16", 32 << 10},
		{"32", "FAT32", 80 << 10},
		// Fewer clusters than FAT32 is meant for: Linux reads it as FAT32
		// by its boot sector, and so must the map.
		{"32", "FAT32", 40 << 10},
	} {
		t.Run(fmt.Sprintf("%s %d MiB", c.kind, c.kib>>10), func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "fat.img")
			run := func(name string, args ...string) string {
				t.Helper()
				out, err := exec.Command(name, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v\n%s", name, args, err, out)
				}
				return string(out)
			}
			run("mkfs.fat", "-F", c.fat, "-C", img, strconv.Itoa(c.kib))
			size := int64(c.kib) << 10
			old, keep := filepath.Join(dir, "old"), filepath.Join(dir, "keep")
			junk, kept := make([]byte, size/2), make([]byte, size/8)
			rand.Read(junk)
			rand.Read(kept)
			os.WriteFile(old, junk, 0o644)
			os.WriteFile(keep, kept, 0o644)
			run("mcopy", "-i", img, old, "::old")
			run("mdel", "-i", img, "::old")
			run("mcopy", "-i", img, keep, "::keep")

			f, _ := os.Open(img)
			defer f.Close()
			m, err := Read(f, size)
			if err != nil {
				t.Fatal(err)
			}
			if m.FS != c.kind {
				t.Fatalf("read as %s, want %s", m.FS, c.kind)
			}
			head := make([]byte, 512)
			f.ReadAt(head, 0)
			b, _ := parseFAT(head)
			dataStart := int64(b.firstData) * int64(b.bytesPerSec)
			dataEnd := dataStart + int64(b.clusters)*m.BlockSize
			var usedData int64
			for _, e := range m.Used {
				usedData += max(0, min(e.End(), dataEnd)-max(e.Off, dataStart))
			}
			mm := bytesFree.FindStringSubmatch(run("mdir", "-i", img, "::"))
			if mm == nil {
				t.Fatal("mdir printed no free bytes")
			}
			free, _ := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(mm[1]), " ", ""), 10, 64)
			if want := dataEnd - dataStart - free; usedData != want {
				t.Errorf("%d bytes of clusters in use by the map, %d by mtools", usedData, want)
			}
			if usedData < int64(len(kept)) || usedData > int64(len(kept))+4*m.BlockSize {
				t.Errorf("%d bytes of clusters in use for a %d-byte file", usedData, len(kept))
			}
			cast := zeroFree(t, img, m)
			run("fsck.fat", "-n", cast)
			got := filepath.Join(dir, "got")
			run("mcopy", "-i", cast, "::keep", got)
			if g, _ := os.ReadFile(got); !bytes.Equal(g, kept) {
				t.Error("the file read back from the copy differs")
			}
			// Left mounted (the driver's dirty bit in the boot sector).
			state := int64(0x25)
			if c.kind == "FAT32" {
				state = 0x41
			}
			w, _ := os.OpenFile(img, os.O_RDWR, 0)
			w.WriteAt([]byte{head[state] | 1}, state)
			w.Close()
			if _, err := Read(f, size); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "fsck.fat") {
				t.Errorf("a volume marked dirty: %v, want ErrDirty saying to run fsck.fat", err)
			}
		})
	}
}

func TestSwapMap(t *testing.T) {
	if _, err := exec.LookPath("mkswap"); err != nil {
		t.Skip("no mkswap: apt-get install util-linux")
	}
	img := filepath.Join(t.TempDir(), "swap.img")
	junk := make([]byte, 8<<20)
	rand.Read(junk)
	os.WriteFile(img, junk, 0o644)
	if out, err := exec.Command("mkswap", img).CombinedOutput(); err != nil {
		t.Fatalf("mkswap: %v\n%s", err, out)
	}
	f, _ := os.Open(img)
	defer f.Close()
	m, err := Read(f, 8<<20)
	if err != nil || m.FS != "swap" || m.UsedBytes() != 4096 {
		t.Errorf("swap map %+v, %v: want its first page in use", m, err)
	}
}
