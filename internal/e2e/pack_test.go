package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"dolly/imaging"
	"dolly/imaging/blockmap"
	"dolly/internal/testimage"
)

// decodedSum is the sha256 of what the image at path decodes to, and the
// block map it holds (nil if none).
func decodedSum(t *testing.T, path string) (string, *blockmap.Map) {
	t.Helper()
	sum, err := testimage.DecodedSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	m, err := im.StoredMap()
	if err != nil {
		t.Fatal(err)
	}
	return sum, m
}

// usedSum is the sha256 of the raw image at path with the free blocks of
// its file system read as zeros, and its map.
func usedSum(t *testing.T, path string) (string, blockmap.Map) {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	m, err := im.ReadMap()
	if err != nil {
		t.Fatal(err)
	}
	if err := im.UseMap(m); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, im.Stream()); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), m
}

// wholeShare is the share of a zstd image's raw bytes that a node decodes
// whole into its disk's buffers (imaging.CountZstd).
func wholeShare(t *testing.T, path string, size int64) float64 {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	c, err := im.ZstdCounts()
	if err != nil {
		t.Fatal(err)
	}
	return float64(c.Whole) / float64(size)
}

// -pack stores a used ext4 image in frames a node decodes whole, its free
// blocks as zeros and its map first; the stored image casts, and every
// target checks clean and holds the file. The image zstd's tool would
// make (one large frame) packs too, and with -zero-free byte for byte.
func TestPackStoresAnImageACastTakesWhole(t *testing.T) {
	dir := t.TempDir()
	const size, keep = 64 << 20, 12 << 20
	img, kept := dirtyExt4(t, dir, size, keep)
	wantUsed, wantMap := usedSum(t, img)

	packed := filepath.Join(dir, "golden.img.zst")
	p := start(t, "dolly-server", "-pack", "-image", img, "-o", packed)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server -pack exited %d:\n%s", code, p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, "ext4: ") || !strings.Contains(out, "checked") {
		t.Errorf("-pack does not say what it mapped and checked:\n%s", out)
	}
	got, m := decodedSum(t, packed)
	switch {
	case got != wantUsed:
		t.Error("the packed image does not decode to the image with its free blocks as zeros")
	case m == nil:
		t.Error("the packed image holds no block map")
	case m.UsedBytes() != wantMap.UsedBytes() || m.Size != wantMap.Size:
		t.Errorf("the packed image maps %d of %d bytes; the file system uses %d of %d", m.UsedBytes(), m.Size, wantMap.UsedBytes(), wantMap.Size)
	}
	// Zero runs travel as zero frames, which count in no decoder; the
	// rest must be frames a node decodes whole.
	if share := wholeShare(t, packed, size); share < float64(keep)/size {
		t.Errorf("only %.0f%% of the packed image is in frames a node decodes whole", 100*share)
	}
	if st, _ := os.Stat(packed); st.Size() > keep*11/10 {
		t.Errorf("the packed image takes %d bytes for a %d-byte file of random data: the free space went too", st.Size(), keep)
	}

	// It casts, and the nodes get the map.
	var ts []string
	for i := range 2 {
		tg := filepath.Join(dir, fmt.Sprintf("pc%d", i))
		testimage.Fill(tg, 0xFF, size)
		ts = append(ts, tg)
	}
	r := runCast(t, []string{"-image", packed, "-chain"}, ts, 2*time.Minute)
	if r.code != 0 {
		t.Fatalf("casting the packed image exited %d:\n%s", r.code, r.server.out.String())
	}
	if out := r.server.out.String(); !strings.Contains(out, "ext4, as the image's own map says") {
		t.Errorf("the cast does not use the packed image's map:\n%s", out)
	}
	checkKeptFile(t, dir, ts, kept)

	// An existing file is never overwritten.
	before, _ := os.ReadFile(packed)
	p = start(t, "dolly-server", "-pack", "-image", img, "-o", packed)
	if code := p.wait(t, time.Minute); code != 3 || !strings.Contains(p.out.String(), "exists") {
		t.Errorf("-pack onto an existing file exited %d (want 3, saying it exists):\n%s", code, p.out.String())
	}
	if after, _ := os.ReadFile(packed); !bytes.Equal(before, after) {
		t.Error("-pack changed an existing file")
	}

	// One large frame, as zstd's tool writes, repacked byte for byte.
	single := filepath.Join(dir, "single.img.zst")
	writeOneFrame(t, img, single)
	if share := wholeShare(t, single, size); share != 0 {
		t.Fatalf("the one-frame image counts %.0f%% in frames decoded whole", 100*share)
	}
	repacked := filepath.Join(dir, "repacked.img.zst")
	p = start(t, "dolly-server", "-pack", "-zero-free", "-image", single, "-o", repacked)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server -pack -zero-free exited %d:\n%s", code, p.out.String())
	}
	want, _ := testimage.SHA256(img, -1)
	if got, m := decodedSum(t, repacked); got != want || m != nil {
		t.Errorf("-zero-free: the repacked image differs from the image (map: %v)", m != nil)
	}
	if share := wholeShare(t, repacked, size); share < 0.5 {
		t.Errorf("only %.0f%% of the repacked image is in frames a node decodes whole", 100*share)
	}
	// Without it, the decoded file system is mapped as a raw one is.
	mapped := filepath.Join(dir, "mapped.img.zst")
	p = start(t, "dolly-server", "-pack", "-image", single, "-o", mapped)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server -pack of a zstd image exited %d:\n%s", code, p.out.String())
	}
	if got, m := decodedSum(t, mapped); got != wantUsed || m == nil || m.UsedBytes() != wantMap.UsedBytes() {
		t.Errorf("the repacked zstd image does not decode to the image with its free blocks as zeros, with its map (map: %v)", m != nil)
	}

	// A damaged image leaves nothing behind.
	b, _ := os.ReadFile(single)
	cut := filepath.Join(dir, "cut.img.zst")
	os.WriteFile(cut, b[:len(b)/2], 0o644)
	out := filepath.Join(dir, "cut.packed.zst")
	p = start(t, "dolly-server", "-pack", "-image", cut, "-o", out)
	if code := p.wait(t, time.Minute); code != 3 || !strings.Contains(p.out.String(), "truncated or corrupt") {
		t.Errorf("-pack of a truncated image exited %d (want 3, saying so):\n%s", code, p.out.String())
	}
	for _, left := range []string{out, out + ".partial"} {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("%s is left after a failed -pack", filepath.Base(left))
		}
	}
}

// writeOneFrame compresses the file at src into one zstd frame at dst.
func writeOneFrame(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc, err := zstd.NewWriter(f, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(enc, in); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
}
