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

// A dirty NTFS volume (a file's clusters freed, not wiped) maps to what its
// $Bitmap says, bit for bit as ntfs-3g reads it, and a copy with the free
// clusters zeroed checks clean and gives its file back.
func TestNTFSMap(t *testing.T) {
	for _, tool := range []string{"mkfs.ntfs", "ntfscp", "ntfsls", "ntfstruncate", "ntfscat", "ntfsfix"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install ntfs-3g", tool)
		}
	}
	dir := t.TempDir()
	run := func(name string, args ...string) []byte {
		t.Helper()
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return out
	}
	const size = 64 << 20
	img := filepath.Join(dir, "nt.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, size)
	run("mkfs.ntfs", "-F", "-Q", "-q", img)
	old, keep := filepath.Join(dir, "old"), filepath.Join(dir, "keep")
	junk, kept := make([]byte, 30<<20), make([]byte, 5<<20)
	rand.Read(junk)
	rand.Read(kept)
	os.WriteFile(old, junk, 0o644)
	os.WriteFile(keep, kept, 0o644)
	run("ntfscp", "-q", img, old, "old")
	var inode string
	for _, line := range strings.Split(string(run("ntfsls", "-i", img)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "old" {
			inode = f[0]
		}
	}
	run("ntfstruncate", img, inode, "0") // frees its clusters, leaves the data
	run("ntfscp", "-q", img, keep, "keep")

	f, _ := os.Open(img)
	defer f.Close()
	m, err := Read(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if m.FS != "NTFS" {
		t.Fatalf("read as %q", m.FS)
	}
	bitmap := run("ntfscat", img, "$Bitmap")
	var differ int
	for c := int64(0); c < size/m.BlockSize && c/8 < int64(len(bitmap)); c++ {
		start, _ := m.NextUsed(c * m.BlockSize)
		inMap := start == c*m.BlockSize
		if set := bitmap[c/8]&(1<<(c%8)) != 0; set != inMap {
			differ++
		}
	}
	// The last cluster's bits cover the backup boot sector, which the map
	// keeps and the bitmap does not count.
	if differ > 1 {
		t.Errorf("%d clusters differ between the map and $Bitmap", differ)
	}
	if used := m.UsedBytes(); used < int64(len(kept)) || used > int64(len(kept))+8<<20 {
		t.Errorf("%d bytes in use for a %d-byte file", used, len(kept))
	}
	cast := zeroFree(t, img, m)
	run("ntfsfix", "-n", cast)
	if got := run("ntfscat", cast, "keep"); !bytes.Equal(got, kept) {
		t.Error("the file read back from the copy differs")
	}

	// Hibernated: hiberfil.sys begins with HIBR.
	hibImg := filepath.Join(dir, "hib.img")
	stored, _ := os.ReadFile(img)
	os.WriteFile(hibImg, stored, 0o644)
	hib := filepath.Join(dir, "hiberfil.sys")
	os.WriteFile(hib, append([]byte("HIBR"), make([]byte, 8188)...), 0o644)
	run("ntfscp", "-q", hibImg, hib, "hiberfil.sys")
	h, _ := os.Open(hibImg)
	defer h.Close()
	if _, err := Read(h, size); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "hibernated") {
		t.Errorf("a hibernated volume: %v, want ErrDirty saying Windows hibernated it", err)
	}

	// Marked dirty in $Volume, as Windows leaves it for chkdsk.
	setNTFSDirty(t, img)
	if _, err := Read(f, size); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "chkdsk") {
		t.Errorf("a volume marked dirty: %v, want ErrDirty saying to run chkdsk", err)
	}
}

// setNTFSDirty sets the dirty flag in $Volume's $VOLUME_INFORMATION, in
// MFT record 3 of the image, as chkdsk would find it.
func setNTFSDirty(t *testing.T, img string) {
	t.Helper()
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	cluster := int64(le.Uint16(data[0x0B:])) * int64(data[0x0D])
	rec := int64(le.Uint64(data[0x30:]))*cluster + 3*1024
	for off := rec + int64(le.Uint16(data[rec+0x14:])); off < rec+1024; {
		typ, n := le.Uint32(data[off:]), int64(le.Uint32(data[off+4:]))
		if typ == 0xFFFFFFFF || n == 0 {
			break
		}
		if typ == ntfsVolumeInfo {
			flags := off + int64(le.Uint16(data[off+0x14:])) + 10
			le.PutUint16(data[flags:], le.Uint16(data[flags:])|ntfsVolumeDirty)
			if err := os.WriteFile(img, data, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		off += n
	}
	t.Fatal("no $VOLUME_INFORMATION in MFT record 3")
}
