package stream

import (
	"os"
	"path/filepath"
	"testing"

	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// A node writes a block device with O_DIRECT, decoding a stream
// compressed on the fly into buffers the target lends, and a stored zstd
// image (one large frame) through the decoder's window: both must write
// the source's every byte.
func TestReceiveToBlockDeviceWritesTheImage(t *testing.T) {
	const size = 11<<20 + 4321 // not a whole number of chunks or blocks
	imgs := makeImages(t, size, testimage.Typical)
	want, err := testimage.SHA256(imgs[imaging.Raw], -1)
	if err != nil {
		t.Fatal(err)
	}
	backing := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(backing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, 16<<20); err != nil {
		t.Fatal(err)
	}
	dev := testenv.LoopDevice(t, backing)
	cases := []struct {
		name string
		path string
		send imaging.Encoding
	}{
		{"zstd on the fly", imgs[imaging.Raw], imaging.Zstd},
		{"zstd stored", imgs[imaging.Zstd], imaging.Zstd},
		{"raw", imgs[imaging.Raw], imaging.Raw},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// What the target held before must not show through.
			if err := os.WriteFile(dev, make([]byte, size), 0); err != nil {
				t.Fatal(err)
			}
			h, stream, _ := encodeStreamAs(t, c.path, 256<<10, c.send)
			tg, err := imaging.OpenTarget(dev, size, imaging.TargetOptions{Direct: true, Shared: true})
			if err != nil {
				t.Fatal(err)
			}
			if !tg.Direct() {
				tg.Close()
				t.Skip("skipped: the loop device refuses O_DIRECT")
			}
			if _, _, err := Receive(&lendingReader{b: stream}, h, nil, tg, nil, Hooks{}); err != nil {
				tg.Close()
				t.Fatal(err)
			}
			if err := tg.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := tg.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := testimage.SHA256(dev, size)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("the device holds sha256 %s, the image is %s", got, want)
			}
		})
	}
}
