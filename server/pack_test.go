package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"dolly/imaging"
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
		if got := decodedSHA256(t, out); got != want {
			t.Errorf("%s: the packed image decodes to other bytes", enc)
		}
		if n := note(out, 0); n != "" {
			t.Errorf("%s: the packed image still gets: %q", enc, n)
		}
	}
}

// decodedSHA256 is the sha256 of what the compressed image at path decodes to.
func decodedSHA256(t *testing.T, path string) string {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	dec, err := imaging.NewDecoder(im.Encoding, im.Stream())
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	h := sha256.New()
	if _, err := io.Copy(h, dec); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
