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

// A sparse raw image compressed on the fly sends the chunks that lie
// wholly in holes as zero frames without reading them; the stream must be
// the same bytes as that of the same image with its zeros written out.
func TestCompressedSparseImageMatchesDense(t *testing.T) {
	const chunk = imaging.ChunkSize
	type piece struct{ off, len int64 }
	tests := []struct {
		name    string
		size    int64
		written []piece
		skipped int64 // bytes of whole chunks in holes
	}{
		{"holes around data", 5 * chunk, []piece{{chunk + 100, 3000}, {3 * chunk, chunk / 2}}, 3 * chunk},
		{"data at both ends", 3*chunk + 123, []piece{{0, 70000}, {3 * chunk, 123}}, 2 * chunk},
		{"a last chunk shorter than a zero run", 2*chunk + 4096, []piece{{0, 1000}}, chunk},
		{"all hole", 2*chunk + 64<<10, nil, 2*chunk + 64<<10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sparse, dense := filepath.Join(dir, "sparse"), filepath.Join(dir, "dense")
			raw := make([]byte, tt.size)
			rng := rand.New(rand.NewPCG(3, 4))
			f, err := os.Create(sparse)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.written {
				b := raw[p.off : p.off+p.len]
				for i := range b {
					b[i] = byte(rng.IntN(4) + 1) // compressible, never zero
				}
				if _, err := f.WriteAt(b, p.off); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(tt.size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.WriteFile(dense, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			h, got, enc := encodeStreamAs(t, sparse, 256<<10, imaging.Zstd)
			_, want, _ := encodeStreamAs(t, dense, 256<<10, imaging.Zstd)
			if !bytes.Equal(got, want) {
				t.Fatalf("the sparse image's stream (%d bytes) differs from the dense one's (%d)", len(got), len(want))
			}
			if n := enc.compressHoles.skipped.Load(); n != tt.skipped {
				im, _ := imaging.OpenImage(sparse)
				defer im.Close()
				if _, _, ok := im.NextData(0); !ok {
					t.Skipf("the file system under %s does not tell holes apart", sparse)
				}
				t.Errorf("%d bytes of holes skipped unread, want %d", n, tt.skipped)
			}
			target, err := receiveInto(t, h, got)
			if err != nil {
				t.Fatal(err)
			}
			got2, _ := testimage.SHA256(target, h.ImageSize)
			if want, _ := testimage.SHA256(dense, -1); got2 != want {
				t.Fatalf("target sha256 %s, image %s", got2, want)
			}
		})
	}
}

// rawHoles skips a chunk only when all of it lies in a hole at least a
// zero run long, and steps the reader past it.
func TestRawHolesSkip(t *testing.T) {
	const chunk = imaging.ChunkSize
	// Data in [chunk+4096, 2*chunk) and [4*chunk, 4*chunk+10); holes
	// elsewhere, up to the size.
	const size = 4*chunk + 10
	next := func(off int64) (data, hole int64, ok bool) {
		switch {
		case off < chunk+4096:
			return chunk + 4096, 2 * chunk, true
		case off < 2*chunk:
			return off, 2 * chunk, true
		case off < 4*chunk:
			return 4 * chunk, size, true
		}
		return off, size, true
	}
	tests := []struct {
		off, want int64
	}{
		{0, chunk},
		{chunk, 0}, // data from 4 KiB in
		{2 * chunk, chunk},
		{3 * chunk, chunk},
		{4 * chunk, 0}, // the last 10 bytes are data
		{size, 0},
	}
	for _, tt := range tests {
		var seek seekRecorder
		h := &rawHoles{next: next, seek: &seek, size: size}
		n, err := h.skip(tt.off)
		if err != nil || n != tt.want {
			t.Errorf("skip(%d) = %d, %v; want %d", tt.off, n, err, tt.want)
		}
		if n > 0 && seek.to != tt.off+n {
			t.Errorf("skip(%d) left the reader at %d, want %d", tt.off, seek.to, tt.off+n)
		}
	}
	unknown := &rawHoles{next: func(int64) (int64, int64, bool) { return 0, 0, false }, seek: &seekRecorder{}, size: size}
	if n, _ := unknown.skip(0); n != 0 || unknown.next != nil {
		t.Errorf("holes unknown: skipped %d and kept asking", n)
	}
}

type seekRecorder struct{ to int64 }

func (s *seekRecorder) Seek(off int64, whence int) (int64, error) {
	if whence != io.SeekStart {
		return 0, errors.New("seek from the start only")
	}
	s.to = off
	return off, nil
}
