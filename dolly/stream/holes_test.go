package stream

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"dolly/imaging"
	"dolly/internal/testimage"
)

// A sparse raw image's holes travel as zero runs without being read; the
// stream must land the same bytes and digest as reading the whole file.
func TestSparseImageHolesAreNotRead(t *testing.T) {
	const mib = 1 << 20
	type piece struct{ off, len int64 } // stored (written) ranges, the rest is holes
	tests := []struct {
		name    string
		size    int64
		written []piece
		unread  int64 // at least this many bytes of holes are skipped unread
	}{
		{"holes around data", 9 * mib, []piece{{2 * mib, mib}, {5*mib + 100, 3000}}, 6 * mib},
		{"data at both ends", 6*mib + 123, []piece{{0, 70000}, {6 * mib, 123}}, 5 * mib},
		{"short holes read as data", 3 * mib, []piece{{0, mib}, {mib + 32<<10, mib}, {2*mib + 64<<10, 1000}}, 0},
		{"a hole ending within a frame", 4 * mib, []piece{{mib + 12<<10, 2 * mib}}, mib},
		{"all hole", 4*mib + 4096, nil, 4 * mib},
		{"no hole", 2*mib + 5, []piece{{0, 2*mib + 5}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, p := range tt.written {
				b := make([]byte, p.len)
				for i := range b {
					b[i] = byte(rng.IntN(255) + 1)
				}
				if _, err := f.WriteAt(b, p.off); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(tt.size); err != nil {
				t.Fatal(err)
			}
			f.Close()

			h, stream, enc := encodeStream(t, path, 256<<10)
			if enc.unread < tt.unread {
				im, _ := imaging.OpenImage(path)
				defer im.Close()
				if _, _, ok := im.NextData(0); !ok {
					t.Skipf("the file system under %s does not tell holes apart", path)
				}
				t.Errorf("%d bytes of holes skipped unread, want at least %d", enc.unread, tt.unread)
			}
			im, err := imaging.OpenImage(path)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			if holes, ok := im.HoleBytes(t.Context()); ok && holes != enc.unread {
				t.Errorf("HoleBytes says %d bytes go unread, the encoder left %d", holes, enc.unread)
			}
			raw, _ := os.ReadFile(path)
			want := imaging.NewDigester()
			want.Write(raw)
			if enc.Digest() != want.Sum() {
				t.Fatal("source digest differs from the digest of the image file")
			}
			var data int64
			fr := NewFrameReader(bytes.NewReader(stream), h, nil)
			for {
				f, err := fr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if f.Kind == FrameData {
					data += f.Length
					// Frames keep to the grid of the frame size, holes or
					// not: a node then takes a digest block's CRC from
					// the frames' (the default frame is one block).
					if fs := int64(h.FrameSize); f.Offset/fs != (f.Offset+f.Length-1)/fs {
						t.Errorf("data frame at %d of %d bytes spans two frames of the grid", f.Offset, f.Length)
					}
				}
			}
			if data > tt.size-tt.unread {
				t.Errorf("%d bytes sent as data, more than the %d stored", data, tt.size-tt.unread)
			}
			target, err := receiveInto(t, h, stream)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := testimage.SHA256(target, h.ImageSize)
			img, _ := testimage.SHA256(path, -1)
			if got != img {
				t.Fatalf("target sha256 %s, image %s", got, img)
			}
		})
	}
}
