package imaging

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The direct writer must put every byte where it belongs whatever the
// sizes and offsets of the writes: aligned or not, contiguous or not,
// smaller or larger than its chunk, over old data.
func TestDirectWriterPlacesEveryByte(t *testing.T) {
	const size = 5<<20 + 777
	old := bytes.Repeat([]byte{0xEE}, size)
	path, cached := targetFile(t, old)
	direct := openDirect(path)
	if direct == nil {
		t.Log("this file system refuses O_DIRECT: testing the cached fallback only")
	}
	w := newDirectWriter(direct, cached)
	defer w.close()

	want := bytes.Clone(old)
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	sizes := []int{1, 511, 4096, 4097, 65536, 300_000, directChunk, directChunk + 3, 3 * directChunk}
	off := int64(0)
	for i := 0; off < size; i++ {
		n := min(int64(sizes[rng.IntN(len(sizes))]), size-off)
		if i%7 == 6 {
			// a jump, as after a zero range: skipped bytes keep old data
			off = min(off+int64(rng.IntN(9000)), size-n)
		}
		if err := w.writeAt(src[off:off+n], off); err != nil {
			t.Fatalf("write of %d at %d: %v", n, off, err)
		}
		copy(want[off:], src[off:off+n])
		off += n
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	requireContent(t, path, want)
}

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{1, 4096, 1 << 20} {
		b := AlignedBuffer(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("AlignedBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
		if addr := sliceAddr(b); addr%DirectAlign != 0 {
			t.Fatalf("AlignedBuffer(%d) at %#x, not %d-aligned", n, addr, DirectAlign)
		}
	}
}

// A chunk written behind that fails makes a later write, or the flush at
// the latest, fail, and every call after it: nothing is lost silently.
func TestDirectWriterReportsAFailedWriteBehind(t *testing.T) {
	path, cached := targetFile(t, make([]byte, 4*directChunk))
	readOnly, err := os.Open(path) // every write through it fails
	if err != nil {
		t.Fatal(err)
	}
	w := newDirectWriter(readOnly, cached)
	defer w.close()
	chunk := bytes.Repeat([]byte{1}, directChunk)
	if err := w.writeAt(chunk, 0); err != nil {
		t.Fatalf("first chunk: %v; want its failure reported later, as it is written behind", err)
	}
	w.writeAt(chunk, directChunk) // may fail already, or queue
	// The failure names the chunk that failed, not the call reporting it.
	if err := w.flush(); err == nil || !strings.Contains(err.Error(), "writing at offset 0:") {
		t.Fatalf("flush after a failed write behind: %v; want the first chunk's failure", err)
	}
	if err := w.writeAt(chunk, 2*directChunk); err == nil {
		t.Fatal("a write after the failure succeeded")
	}
	if err := w.zero(func() error { return nil }); err == nil {
		t.Fatal("a zeroing after the failure succeeded")
	}
}

// Zero ranges and writes reach the target in the order they were made,
// although the disk goroutine runs them behind the caller.
func TestDirectWriterKeepsZeroRangesInOrder(t *testing.T) {
	const size = 6 * directChunk
	path, cached := targetFile(t, bytes.Repeat([]byte{0xEE}, size))
	w := newDirectWriter(openDirect(path), cached)
	defer w.close()
	want := bytes.Repeat([]byte{0xEE}, size)
	zero := func(off, n int) {
		if err := w.zero(func() error { return writeZeros(cached, int64(off), int64(n)) }); err != nil {
			t.Fatal(err)
		}
		clear(want[off : off+n])
	}
	write := func(off, n int, b byte) {
		if err := w.writeAt(bytes.Repeat([]byte{b}, n), int64(off)); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], bytes.Repeat([]byte{b}, n))
	}
	// Data, then zeros over part of it (the data must land first), then
	// data over part of the zeros (the zeros must land first).
	write(0, 3*directChunk+100, 1)
	zero(directChunk, directChunk)
	write(directChunk+4096, 5000, 2)
	zero(4*directChunk, 10)
	write(4*directChunk+5, 2*directChunk-5, 3)
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	requireContent(t, path, want)
}

// Zero ranges fill the queue without holding chunks; the writer must not
// wait for a chunk that none of them will give back.
func TestDirectWriterZeroRangesFirst(t *testing.T) {
	path, cached := targetFile(t, make([]byte, 4*directChunk))
	w := newDirectWriter(openDirect(path), cached)
	defer w.close()
	release := make(chan struct{})
	slow := func() error { <-release; return nil }
	for range directQueue {
		if err := w.zero(slow); err != nil {
			t.Fatal(err)
		}
	}
	go func() { close(release) }()
	chunk := bytes.Repeat([]byte{1}, directChunk)
	for i := range 3 {
		if err := w.writeAt(chunk, int64(i)*directChunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
}

// targetFile writes content to a new file and opens it for a direct
// writer, as a target does: its path and the cached descriptor.
func targetFile(t *testing.T, content []byte) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	cached, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cached.Close() })
	return path, cached
}

// requireContent fails unless the file at path holds want.
func requireContent(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("target differs from what was written, first at byte %d of %d (want %d bytes)", i, len(got), len(want))
	}
}

// A node may close its target while its receiver, stopped by the same
// failure, still writes: the writes must fail cleanly, not crash.
func TestDirectWriterClosedWhileWriting(t *testing.T) {
	path, cached := targetFile(t, make([]byte, 8*directChunk))
	w := newDirectWriter(openDirect(path), cached)
	chunk := bytes.Repeat([]byte{1}, directChunk/3)
	errs := make(chan error, 1)
	go func() {
		for off := int64(0); off+int64(len(chunk)) <= 8*directChunk; off += int64(len(chunk)) {
			if err := w.writeAt(chunk, off); err != nil {
				errs <- err
				return
			}
			if err := w.zero(func() error { return nil }); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v, want os.ErrClosed", err)
	}
	if err := w.writeAt(chunk, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v, want os.ErrClosed", err)
	}
	if err := w.flush(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("flush after close: %v, want os.ErrClosed", err)
	}
}
