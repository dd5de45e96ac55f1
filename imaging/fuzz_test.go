package imaging

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The seed corpora under testdata/fuzz are checked in; this flag rewrites
// the generated ones: go test ./imaging -run TestWriteFuzzSeeds -args -write-fuzz-seeds
var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite the generated seed corpora in testdata/fuzz")

// FuzzDetect checks format sniffing: it looks at MagicLen bytes at most,
// and calls nothing compressed that lacks the format's magic.
func FuzzDetect(f *testing.F) {
	f.Fuzz(func(t *testing.T, head []byte) {
		enc, err := Detect(head)
		enc2, err2 := Detect(head[:min(len(head), MagicLen)])
		if enc != enc2 || (err == nil) != (err2 == nil) {
			t.Fatalf("Detect depends on bytes past the first %d: %v, %v and %v, %v", MagicLen, enc, err, enc2, err2)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "dolly does not read") {
				t.Fatalf("error %q does not say what to do", err)
			}
			return
		}
		switch enc {
		case Gzip:
			if !bytes.HasPrefix(head, []byte{0x1f, 0x8b, 0x08}) {
				t.Fatalf("%x detected as gzip", head)
			}
		case Zstd:
			if len(head) < 4 || head[1] != 0x2a && head[1] != 0xb5 {
				t.Fatalf("%x detected as zstd", head)
			}
		case Raw:
		default:
			t.Fatalf("unknown encoding %v", enc)
		}
	})
}

// fuzzDecodeLimit stops a scan whose input expands past it: a few bytes of
// zstd can describe gigabytes, and each iteration must stay cheap.
const fuzzDecodeLimit = 8 << 20

// FuzzOpenImage opens arbitrary bytes as an image file and scans it. Opening
// and scanning must fail with an error or succeed, never panic; a raw image
// is the file as it is, and a scanned one's size and digest must be those of
// decoding it plainly.
func FuzzOpenImage(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "image")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		im, err := OpenImage(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the image", err)
			}
			return
		}
		defer im.Close()
		if im.StreamSize != int64(len(data)) {
			t.Fatalf("stream size %d of a %d-byte file", im.StreamSize, len(data))
		}
		if !im.Encoding.Compressed() {
			if im.Size != int64(len(data)) {
				t.Fatalf("raw image of %d bytes has size %d", len(data), im.Size)
			}
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err = im.Scan(ctx, func(raw int64) {
			if raw > fuzzDecodeLimit {
				cancel()
			}
		}, nil)
		if err != nil {
			if ctx.Err() == nil && !strings.Contains(err.Error(), path) {
				t.Fatalf("scan error %q does not name the image", err)
			}
			return
		}
		dec, err := NewDecoder(im.Encoding, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("scanned, but does not decode: %v", err)
		}
		defer dec.Close()
		d := NewDigester()
		if _, err := io.Copy(d, dec); err != nil {
			t.Fatalf("scanned, but decoding fails: %v", err)
		}
		if d.Len() != im.Size || d.Sum() != im.Digest {
			t.Fatalf("scan says %d bytes, digest %s; decoding gives %d, %s", im.Size, im.Digest.Short(), d.Len(), d.Sum().Short())
		}
	})
}

// memDisk is a BlockWriter in memory that starts out as old data (0xFF)
// and counts how the image reached it.
type memDisk struct {
	b            []byte
	wrote, zeros int64
}

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > int64(len(m.b))-off {
		return 0, fmt.Errorf("write of %d bytes at %d beyond %d", len(p), off, len(m.b))
	}
	m.wrote += int64(len(p))
	return copy(m.b[off:], p), nil
}

func (m *memDisk) ZeroRange(off, n int64) error {
	if off < 0 || n < 0 || n > int64(len(m.b))-off {
		return fmt.Errorf("zeroing %d bytes at %d beyond %d", n, off, len(m.b))
	}
	if off%ZeroBlock != 0 || (n%ZeroBlock != 0 && off+n != int64(len(m.b))) {
		return fmt.Errorf("zeroing %d bytes at %d: not whole blocks", n, off)
	}
	m.zeros += n
	clear(m.b[off : off+n])
	return nil
}

// FuzzSparseWriter builds an image from a recipe of data and zero runs and
// writes it through SparseWriter in uneven pieces. The target must read
// back the image over old data, every byte must arrive once, and the digest
// must be the image's.
func FuzzSparseWriter(f *testing.F) {
	f.Add([]byte{1, 10, 0, 70, 3, 2, 0, 255, 0, 63, 5}, []byte{0, 3, 100, 6, 255})
	f.Add([]byte{2, 200, 1, 0, 0, 255, 0, 255, 7}, []byte{126, 9, 254, 0})
	f.Fuzz(func(t *testing.T, recipe []byte, pieces []byte) {
		// Each pair of recipe bytes is a run: zeros (even first byte) or
		// data, of 1 to 256 units of 1 KiB (less at the end of the recipe).
		var img []byte
		for i := 0; i+1 < len(recipe) && len(img) < 5<<18; i += 2 {
			n := (int(recipe[i+1]) + 1) << 10
			if recipe[i]%2 == 0 {
				img = append(img, make([]byte, n)...)
			} else {
				img = append(img, bytes.Repeat([]byte{recipe[i] | 1}, n)...)
			}
		}
		if len(recipe)%2 == 1 {
			img = append(img, bytes.Repeat([]byte{recipe[len(recipe)-1]}, int(recipe[len(recipe)-1]))...)
		}
		disk := &memDisk{b: bytes.Repeat([]byte{0xFF}, len(img))}
		d := NewDigester()
		w := NewSparseWriter(disk, d, int64(len(img)))
		rest := img
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(pieces) > 0 {
				n = min(n, (int(pieces[i%len(pieces)])+1)*517)
			}
			// Some all-zero pieces come as runs, as a zstd stream's zero
			// frames do, at any offset.
			if len(pieces) > 0 && pieces[i%len(pieces)]%3 == 0 && IsZero(rest[:n]) {
				if err := w.WriteZeros(int64(n)); err != nil {
					t.Fatal(err)
				}
			} else if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if _, err := w.Write([]byte{0}); err == nil {
			t.Fatal("a write past the image length was accepted")
		}
		if err := w.WriteZeros(1); err == nil {
			t.Fatal("zeros past the image length were accepted")
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(disk.b, img) {
			t.Fatal("the target does not read back the image")
		}
		if disk.wrote+disk.zeros != int64(len(img)) {
			t.Fatalf("%d bytes written and %d zeroed for an image of %d", disk.wrote, disk.zeros, len(img))
		}
		want := NewDigester()
		want.Write(img)
		if d.Sum() != want.Sum() || d.Len() != int64(len(img)) {
			t.Fatal("the digest is not the image's")
		}
	})
}

// TestWriteFuzzSeeds writes the generated seed corpora: short images, raw
// and compressed, whole and cut, and the magic of every format Detect knows.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeFuzzSeeds {
		t.Skip("rewrites testdata/fuzz; run with -write-fuzz-seeds")
	}
	raw := make([]byte, 20<<10)
	copy(raw[8<<10:], bytes.Repeat([]byte("ext4 superblock "), 256))
	writeSeed(t, "FuzzOpenImage", "raw", raw)
	for _, enc := range []Encoding{Zstd, Gzip} {
		var b bytes.Buffer
		if err := Compress(&b, enc, bytes.NewReader(raw), 1); err != nil {
			t.Fatal(err)
		}
		writeSeed(t, "FuzzOpenImage", enc.String(), b.Bytes())
		writeSeed(t, "FuzzOpenImage", enc.String()+"-truncated", b.Bytes()[:b.Len()/2])
		writeSeed(t, "FuzzDetect", enc.String(), b.Bytes()[:MagicLen])
	}
	for _, u := range unsupported {
		writeSeed(t, "FuzzDetect", u.name, u.magic)
		writeSeed(t, "FuzzOpenImage", u.name, append(bytes.Clone(u.magic), "rest of the file"...))
	}
	writeSeed(t, "FuzzDetect", "zstd-skippable", []byte{0x50, 0x2a, 0x4d, 0x18, 0, 0})
	writeSeed(t, "FuzzOpenImage", "empty", []byte{})
	writeSeed(t, "FuzzSparseWriter", "mixed", []byte{1, 10, 0, 70, 3, 2, 0, 255, 0, 63, 5}, []byte{7, 200, 1})
	writeSeed(t, "FuzzSparseWriter", "zeros", []byte{0, 255, 0, 255, 0, 255, 0, 255, 0, 255}, []byte{})
}

// writeSeed writes one corpus file in the "go test fuzz v1" format.
func writeSeed(t *testing.T, fuzzName, name string, args ...[]byte) {
	t.Helper()
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(a)))
	}
	dir := filepath.Join("testdata", "fuzz", fuzzName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
