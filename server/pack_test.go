package server

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// A gzip image, and a zstd one in one large frame, pack to an image that
// decodes to the same bytes in frames a node decodes whole; a cast of the
// first two suggests -pack, of the packed one or a raw one not.
func TestPackAndItsSuggestion(t *testing.T) {
	const size = 8<<20 + 999
	imgs, want := images(t, size)
	note := func(path string, worthIt int64) string {
		im, err := imaging.OpenImage(path)
		if err != nil {
			t.Fatal(err)
		}
		defer im.Close()
		return packNote(im, worthIt)
	}
	if n := note(imgs[imaging.Raw], 0); n != "" {
		t.Errorf("a raw image: %q", n)
	}
	for _, enc := range []imaging.Encoding{imaging.Gzip, imaging.Zstd} {
		if n := note(imgs[enc], 0); !strings.Contains(n, "dolly-server -pack -image "+imgs[enc]) {
			t.Errorf("%s: the cast does not suggest -pack: %q", enc, n)
		}
		if n := note(imgs[enc], 1<<40); n != "" {
			t.Errorf("%s: a small image is worth no -pack, yet: %q", enc, n)
		}
		out := filepath.Join(t.TempDir(), "packed.zst")
		sum, err := Pack(context.Background(), PackConfig{Image: imgs[enc], Output: out, AllBlocks: true})
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		if sum.Size != size || sum.Used != size || !sum.Started {
			t.Errorf("%s: summary %+v", enc, sum)
		}
		if got, err := testimage.DecodedSHA256(out); err != nil || got != want {
			t.Errorf("%s: the packed image decodes to other bytes", enc)
		}
		if n := note(out, 0); n != "" {
			t.Errorf("%s: the packed image still gets: %q", enc, n)
		}
	}
}

// A pack that fails once it has begun to write (here its file system
// fills) says why and leaves nothing behind: no image, no .partial.
func TestPackThatFailsLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	os.Mkdir(full, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", full).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", full).Run() })
	// Random bytes do not compress: 8 MiB of them cannot fit in 1 MiB.
	img := filepath.Join(dir, "random.img")
	b := make([]byte, 8<<20)
	rand.Read(b)
	os.WriteFile(img, b, 0o644)
	gz := img + ".gz"
	if err := testimage.Compress(img, gz, imaging.Gzip); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{img, gz} {
		out := filepath.Join(full, "packed.zst")
		sum, err := Pack(context.Background(), PackConfig{Image: src, Output: out})
		if err == nil || !sum.Started || !strings.Contains(err.Error(), "no space left") {
			t.Errorf("%s: Pack onto a full file system: started %v, error %v", filepath.Base(src), sum.Started, err)
		}
		for _, left := range []string{out, out + ".partial"} {
			if _, err := os.Stat(left); err == nil {
				t.Errorf("%s: %s is left after the pack failed", filepath.Base(src), filepath.Base(left))
			}
		}
	}
}
