package imaging

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		head    []byte
		want    Encoding
		wantErr string
	}{
		{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00}, Zstd, ""},
		{"zstd skippable", []byte{0x50, 0x2a, 0x4d, 0x18, 0, 0}, Zstd, ""},
		{"gzip", []byte{0x1f, 0x8b, 0x08, 0, 0, 0}, Gzip, ""},
		{"ext4 starts with zeros", make([]byte, 6), Raw, ""},
		{"ntfs boot sector", []byte{0xeb, 0x52, 0x90, 'N', 'T', 'F'}, Raw, ""},
		{"short", []byte{0x1f}, Raw, ""},
		{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0}, 0, "xz-compressed"},
		{"bzip2", []byte("BZh91A"), 0, "bzip2-compressed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(tt.head)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Detect = %v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Detect = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// sampleImage returns n bytes of random data with zero runs of varied
// lengths and alignments, like a mostly empty filesystem.
func sampleImage(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := 0; i < n; {
		k := min(n-i, 1+r.IntN(300<<10))
		if r.IntN(2) == 0 {
			for j := i; j < i+k; j++ {
				p[j] = byte(r.Uint32() | 1) // never zero, so runs stay as drawn
			}
		}
		i += k
	}
	return p
}

// Zeros fed as a count land the digest that the zero bytes do, wherever
// in a block they start and however many blocks they span.
func TestDigestWriteZeros(t *testing.T) {
	head := sampleImage(4, DigestBlock)
	for i := range head {
		head[i] |= 1
	}
	for _, fill := range []int{0, 1, 4095, DigestBlock - 1} {
		for _, n := range []int64{1, 7, 4096, DigestBlock - 1, DigestBlock, DigestBlock + 3, 3*DigestBlock + 5} {
			direct := NewDigester()
			direct.Write(head[:fill])
			direct.Write(make([]byte, n))
			direct.Write(head[:9])
			counted := NewDigester()
			counted.Write(head[:fill])
			counted.WriteZeros(n)
			counted.Write(head[:9])
			if got, want := counted.Sum(), direct.Sum(); got != want {
				t.Errorf("%d zeros after %d bytes: digest %s, the zero bytes give %s", n, fill, got.Short(), want.Short())
			}
		}
	}
}

func TestDigestIndependentOfChunking(t *testing.T) {
	img := sampleImage(1, 5<<20+123)
	whole := NewDigester()
	whole.Write(img)
	want := whole.Sum()

	// Chunks of any length, fed as bytes, as zeros, or as bytes with their
	// CRC (which the digest reuses), give the same digest.
	r := rand.New(rand.NewPCG(2, 2))
	chunked := NewDigester()
	for p := img; len(p) > 0; {
		k := min(len(p), 1+r.IntN(3<<20))
		switch {
		case IsZero(p[:k]):
			chunked.WriteZeros(int64(k))
		case r.IntN(2) == 0:
			chunked.WriteCRC(p[:k], CRC32C(p[:k]))
		default:
			chunked.Write(p[:k])
		}
		p = p[k:]
	}
	if got := chunked.Sum(); got != want {
		t.Fatalf("chunked digest %s != whole digest %s", got, want)
	}
	wrong := NewDigester()
	wrong.WriteCRC(img, CRC32C(img)^1)
	if wrong.Sum() == want {
		t.Fatal("a wrong CRC given with the bytes did not change the digest")
	}

	img[len(img)/2] ^= 1
	changed := NewDigester()
	changed.Write(img)
	if changed.Sum() == want {
		t.Fatal("flipping one bit did not change the digest")
	}
	longer := NewDigester()
	longer.Write(append(img[:len(img):len(img)], 0))
	if longer.Sum() == want {
		t.Fatal("appending a zero byte did not change the digest")
	}
}

func TestSegments(t *testing.T) {
	const B = ZeroBlock
	data := func(n int) []byte { return bytes.Repeat([]byte{7}, n) }
	zeros := func(n int) []byte { return make([]byte, n) }
	cat := func(ps ...[]byte) []byte { return bytes.Join(ps, nil) }
	tests := []struct {
		name   string
		p      []byte
		off    int64
		minRun int
		eof    bool
		want   []Segment
	}{
		{"all data", data(3 * B), 0, B, false, []Segment{{0, 3 * B, false}}},
		{"all zero", zeros(4 * B), 0, B, false, []Segment{{0, 4 * B, true}}},
		{"short run folds into data", cat(data(B), zeros(B), data(B)), 0, 2 * B, false,
			[]Segment{{0, 3 * B, false}}},
		{"run in the middle", cat(data(B), zeros(2*B), data(10)), 0, 2 * B, false,
			[]Segment{{0, B, false}, {B, 2 * B, true}, {3 * B, 10, false}}},
		{"unaligned offset", cat(zeros(100), zeros(2*B)), B - 100, B, false,
			[]Segment{{B - 100, 100, false}, {B, 2 * B, true}}},
		{"partial tail is zero only at eof", zeros(B + 10), 0, B, true,
			[]Segment{{0, B + 10, true}}},
		{"partial tail is data before eof", zeros(B + 10), 0, B, false,
			[]Segment{{0, B, true}, {B, 10, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Segment
			Segments(tt.p, tt.off, tt.minRun, tt.eof, func(s Segment) { got = append(got, s) })
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func fill(t testing.TB, path string, b byte, n int) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Repeat([]byte{b}, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckTargetRefusesSmallTargetAndLeavesItAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "small")
	fill(t, path, 0xAB, 1000)
	before, _ := os.ReadFile(path)
	_, err := CheckTarget(path, 2_100_000_000)
	if err == nil {
		t.Fatal("a 1 kB target was accepted for a 2.1 GB image")
	}
	for _, want := range []string{path, "1.0 kB", "2.1 GB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := OpenTarget(path, 2_100_000_000, TargetOptions{}); err == nil {
		t.Fatal("OpenTarget accepted a small target")
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("refused target was changed")
	}
}

func TestCheckTargetErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, path, want string
	}{
		{"directory", dir, "is a directory"},
		{"missing directory", filepath.Join(dir, "nope", "disk"), "neither does its directory"},
		{"character device", "/dev/null", "character device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckTarget(tt.path, 10)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckTarget(%s) = %v; want error containing %q", tt.path, err, tt.want)
			}
		})
	}
}

func TestTargetZeroRangeAndLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	fill(t, path, 0xFF, 1<<20)
	tg, err := OpenTarget(path, 1<<20-1000, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if err := tg.ZeroRange(4096, 100_000); err != nil {
		t.Fatal(err)
	}
	if err := tg.ZeroRange(1, 10); err != nil { // unaligned, tiny
		t.Fatal(err)
	}
	if _, err := tg.WriteAt([]byte{1}, tg.Size()); err == nil {
		t.Fatal("write beyond the image length was accepted")
	}
	if err := tg.ZeroRange(tg.Size()-10, 11); err == nil {
		t.Fatal("zeroing beyond the image length was accepted")
	}
	got, _ := os.ReadFile(path)
	want := bytes.Repeat([]byte{0xFF}, 1<<20)
	clear(want[4096 : 4096+100_000])
	clear(want[1:11])
	if !bytes.Equal(got, want) {
		t.Fatal("target does not hold the expected bytes after ZeroRange")
	}
}

func TestOpenTargetCreatesMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.img")
	tg, err := OpenTarget(path, 12345, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tg.Close()
	st, err := os.Stat(path)
	if err != nil || st.Size() != 12345 {
		t.Fatalf("created target: %v, size %d; want 12345", err, st.Size())
	}
}

// writeSparse writes img through a SparseWriter to a target pre-filled with
// 0xFF and returns the target's bytes and the writer's digest.
func writeSparse(t *testing.T, img []byte, chunks int) ([]byte, Digest) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk")
	fill(t, path, 0xFF, len(img)+5000)
	tg, err := OpenTarget(path, int64(len(img)), TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := NewDigester()
	w := NewSparseWriter(tg, d, int64(len(img)))
	for p := img; len(p) > 0; {
		k := min(len(p), chunks)
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got[len(img):], bytes.Repeat([]byte{0xFF}, 5000)) {
		t.Fatal("bytes beyond the image were changed")
	}
	return got[:len(img)], d.Sum()
}

func TestSparseWriterOverOldData(t *testing.T) {
	img := sampleImage(3, 7<<20+777)
	want := NewDigester()
	want.Write(img)
	for _, chunk := range []int{1, 4096, 100_000, 8 << 20} {
		if chunk == 1 {
			chunk = 333 // odd sizes exercise the buffering
		}
		got, d := writeSparse(t, img, chunk)
		if sha256.Sum256(got) != sha256.Sum256(img) {
			t.Fatalf("chunk %d: target differs from image", chunk)
		}
		if d != want.Sum() {
			// Sum finalises; recompute for the next round.
			t.Fatalf("chunk %d: digest differs", chunk)
		}
		want = NewDigester()
		want.Write(img)
	}
}

func TestSparseWriterRejectsLongAndShortStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	fill(t, path, 0, 100)
	tg, err := OpenTarget(path, 100, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	w := NewSparseWriter(tg, NewDigester(), 50)
	if _, err := w.Write(make([]byte, 51)); err == nil {
		t.Fatal("a stream longer than announced was accepted")
	}
	w = NewSparseWriter(tg, NewDigester(), 50)
	w.Write(make([]byte, 49))
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "ended after 49 of 50") {
		t.Fatalf("short stream: Close = %v", err)
	}
}

func compress(t *testing.T, enc Encoding, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	switch enc {
	case Zstd:
		w, _ := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedFastest))
		w.Write(p)
		w.Close()
	case Gzip:
		w, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
		w.Write(p)
		w.Close()
	default:
		return p
	}
	return b.Bytes()
}

func TestOpenImageAndScan(t *testing.T) {
	raw := sampleImage(4, 3<<20+5)
	d := NewDigester()
	d.Write(raw)
	want := d.Sum()
	for _, enc := range []Encoding{Raw, Zstd, Gzip} {
		t.Run(enc.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img")
			stored := compress(t, enc, raw)
			os.WriteFile(path, stored, 0o644)
			im, err := OpenImage(path)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			if im.Encoding != enc || im.StreamSize != int64(len(stored)) {
				t.Fatalf("OpenImage: encoding %v size %d; want %v %d", im.Encoding, im.StreamSize, enc, len(stored))
			}
			if err := im.Scan(context.Background(), nil, nil); err != nil {
				t.Fatal(err)
			}
			if im.Size != int64(len(raw)) {
				t.Fatalf("Size = %d, want %d", im.Size, len(raw))
			}
			if enc != Raw && im.Digest != want {
				t.Fatalf("Digest = %s, want %s", im.Digest, want)
			}
		})
	}
}

func TestScanRejectsTruncatedImages(t *testing.T) {
	raw := sampleImage(5, 2<<20)
	for _, enc := range []Encoding{Zstd, Gzip} {
		t.Run(enc.String(), func(t *testing.T) {
			stored := compress(t, enc, raw)
			path := filepath.Join(t.TempDir(), "img")
			os.WriteFile(path, stored[:len(stored)*2/3], 0o644)
			im, err := OpenImage(path)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			err = im.Scan(context.Background(), nil, nil)
			if err == nil || !strings.Contains(err.Error(), "truncated or corrupt") {
				t.Fatalf("Scan of a truncated %s image = %v", enc, err)
			}
		})
	}
}

func TestOpenImageErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	xz := filepath.Join(dir, "x.xz")
	os.WriteFile(xz, []byte{0xfd, '7', 'z', 'X', 'Z', 0, 1, 2}, 0o644)
	tests := []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "does not exist"},
		{empty, "is empty"},
		{dir, "is a directory"},
		{xz, "xz-compressed"},
	}
	for _, tt := range tests {
		if _, err := OpenImage(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenImage(%s) = %v; want error containing %q", tt.path, err, tt.want)
		}
	}
}

// countingTarget records the calls a writer makes.
type countingTarget struct {
	writes, zeroes int
	zeroed         int64
}

func (c *countingTarget) WriteAt(p []byte, off int64) (int, error) { c.writes++; return len(p), nil }
func (c *countingTarget) ZeroRange(off, n int64) error             { c.zeroes++; c.zeroed += n; return nil }

// A long run of zeros crosses many chunks; it must be zeroed in one call,
// not one per chunk (each call is a hole punch or BLKZEROOUT).
func TestSparseWriterCoalescesZeroRuns(t *testing.T) {
	img := make([]byte, 20<<20)
	copy(img[5<<20:], bytes.Repeat([]byte{1}, 1000))
	var c countingTarget
	w := NewSparseWriter(&c, NewDigester(), int64(len(img)))
	for p := img; len(p) > 0; p = p[min(len(p), 100_000):] {
		w.Write(p[:min(len(p), 100_000)])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if c.zeroes != 2 || c.zeroed != int64(len(img))-4096 {
		t.Fatalf("%d zeroing calls over %d bytes; want 2 over %d", c.zeroes, c.zeroed, len(img)-4096)
	}
}
