package imaging

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"dolly/imaging/blockmap"
)

// dirtyExt4 makes an ext4 image whose free blocks hold old random data: a
// large random file written and deleted, then a smaller one kept.
func dirtyExt4(t *testing.T, size int64) (img string, kept []byte) {
	t.Helper()
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install e2fsprogs", tool)
		}
	}
	dir := t.TempDir()
	img = filepath.Join(dir, "fs.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, size)
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", img).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	old, keep := filepath.Join(dir, "old"), filepath.Join(dir, "keep")
	junk := make([]byte, size/2)
	rand.Read(junk)
	os.WriteFile(old, junk, 0o644)
	kept = make([]byte, size/8)
	rand.Read(kept)
	os.WriteFile(keep, kept, 0o644)
	for _, req := range []string{"write " + old + " old", "rm old", "write " + keep + " keep"} {
		if out, err := exec.Command("debugfs", "-w", "-R", req, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs %s: %v\n%s", req, err, out)
		}
	}
	return img, kept
}

// Through its map, a dirty image reads as its file system uses it: used
// blocks as stored, free ones as zeros; the stream's holes take in the
// free space; and the fingerprint tells mapped from unmapped.
func TestImageReadThroughItsMap(t *testing.T) {
	const size = 32 << 20
	path, kept := dirtyExt4(t, size)
	stored, _ := os.ReadFile(path)
	im, err := OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	plain, _ := im.Fingerprint()
	m, err := im.ReadMap()
	if err != nil {
		t.Fatal(err)
	}
	if err := im.UseMap(m); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(im.Stream())
	if err != nil || len(got) != size {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	var free, junk int64
	for off := int64(0); off < size; off += m.BlockSize {
		start, _ := m.NextUsed(off)
		block, want := got[off:off+m.BlockSize], stored[off:off+m.BlockSize]
		if start == off {
			if !bytes.Equal(block, want) {
				t.Fatalf("used block at %d differs from the file", off)
			}
			continue
		}
		free += m.BlockSize
		if !bytes.Equal(block, make([]byte, m.BlockSize)) {
			t.Fatalf("free block at %d reads %x…, want zeros", off, block[:8])
		}
		if !bytes.Equal(want, make([]byte, m.BlockSize)) {
			junk += m.BlockSize
		}
	}
	if junk < size/4 {
		t.Fatalf("only %d bytes of old data in the free blocks: the image is not dirty", junk)
	}
	if !bytes.Contains(got, kept[:4096]) {
		t.Error("the kept file's first block is not in the image read through the map")
	}
	holes, ok := im.HoleBytes(t.Context())
	if !ok || holes < free*9/10 {
		t.Errorf("holes %d (%v), want most of the %d free bytes", holes, ok, free)
	}
	p := make([]byte, 3*m.BlockSize)
	if _, err := im.ReadAt(p, size-3*m.BlockSize); err != nil {
		t.Errorf("ReadAt at the end: %v", err)
	}
	if mapped, _ := im.Fingerprint(); mapped == plain {
		t.Error("the fingerprint is the same with the map and without")
	}
	if err := im.UseMap(blockmap.Map{Size: size + 1}); err == nil {
		t.Error("a map of another size was taken")
	}
}

// A compressed image of a file system maps, once scanned, as its raw
// image does: decoded from its start up to each record the map reads.
func TestCompressedImageMapsAsItsRawImage(t *testing.T) {
	raw, _ := dirtyExt4(t, 32<<20)
	rf, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	want, err := blockmap.Read(rf, 32<<20)
	rf.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []Encoding{Zstd, Gzip} {
		t.Run(enc.String(), func(t *testing.T) {
			packed := filepath.Join(t.TempDir(), "fs.img."+enc.String())
			in, _ := os.Open(raw)
			out, _ := os.Create(packed)
			if err := Compress(out, enc, in, 1); err != nil {
				t.Fatal(err)
			}
			in.Close()
			out.Close()
			im, err := OpenImage(packed)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			if _, err := im.ReadMap(); !errors.Is(err, blockmap.ErrUnknown) {
				t.Fatalf("mapped before the scan (size unknown): %v", err)
			}
			if err := im.Scan(context.Background(), nil, nil); err != nil {
				t.Fatal(err)
			}
			got, err := im.ReadMap()
			if err != nil {
				t.Fatal(err)
			}
			_, err = im.readDecodedMap(64 << 10)
			if !errors.Is(err, ErrMapTooFar) || !errors.Is(err, blockmap.ErrUnknown) {
				t.Fatalf("mapped within 64 KiB of decoding: %v", err)
			}
			if want := "image " + packed + ": not mapped: its file system keeps its records further in than"; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %q, want it to begin %q", err, want)
			}
			if got.FS != want.FS || got.UsedBytes() != want.UsedBytes() || !reflect.DeepEqual(got, want) {
				t.Fatalf("mapped %s, %d bytes in use; the raw image %s, %d", got.FS, got.UsedBytes(), want.FS, want.UsedBytes())
			}
		})
	}
}

// decodedAt reads anywhere, forward or back, and stops at its budget.
func TestDecodedAtReadsBackAndStopsAtItsBudget(t *testing.T) {
	data := make([]byte, 4<<20)
	mixedData(data)
	packed := filepath.Join(t.TempDir(), "data.zst")
	out, _ := os.Create(packed)
	if err := Compress(out, Zstd, bytes.NewReader(data), 1); err != nil {
		t.Fatal(err)
	}
	out.Close()
	im, err := OpenImage(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if err := im.Scan(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	d := &decodedAt{im: im, budget: int64(len(data)) * 5 / 2}
	defer d.close()
	for _, r := range []struct{ off, n int64 }{{3 << 20, 4096}, {1000, 100}, {2 << 20, 1 << 20}} {
		p := make([]byte, r.n)
		if n, err := d.ReadAt(p, r.off); err != nil || !bytes.Equal(p[:n], data[r.off:r.off+r.n]) {
			t.Fatalf("ReadAt(%d, %d) = %d, %v, or other bytes", r.off, r.n, n, err)
		}
	}
	if n, err := d.ReadAt(make([]byte, 20), 4<<20-10); n != 10 || err != io.EOF {
		t.Fatalf("reading past the end: %d, %v; want 10, EOF", n, err)
	}
	if _, err := d.ReadAt(make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadAt(make([]byte, 10), 4<<20-20); err == nil || !d.over {
		t.Fatalf("decoded past its budget: %v", err)
	}
}

// FreeAsZeros clears exactly the free bytes, whatever the reads' sizes.
func TestFreeAsZerosClearsTheFreeBytes(t *testing.T) {
	const size = 10000
	m := blockmap.Map{Size: size, Used: []blockmap.Extent{{Off: 0, Len: 100}, {Off: 1000, Len: 1}, {Off: 4096, Len: 3000}, {Off: 9999, Len: 1}}}
	src := bytes.Repeat([]byte{0xA5}, size+50) // read past the map's end: kept
	want := make([]byte, len(src))
	for _, e := range m.Used {
		copy(want[e.Off:e.End()], src[e.Off:e.End()])
	}
	copy(want[size:], src[size:])
	for _, chunk := range []int{1, 7, 100, 4096, size + 50} {
		r := FreeAsZeros(iotest.OneByteReader(bytes.NewReader(src)), m)
		if chunk > 1 {
			r = FreeAsZeros(bytes.NewReader(src), m)
		}
		var got []byte
		buf := make([]byte, chunk)
		for {
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("reads of %d: the free bytes are not zeros, or the used ones changed", chunk)
		}
	}
}
