package imaging

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Bytes decoded into lent buffers reach the disk from where they lie,
// among writes from elsewhere and zero ranges, whatever their sizes and
// offsets; a buffer lent again is one the disk is done with, so filling
// it anew never changes what an earlier write put on the target.
func TestDirectWriterWritesLentBuffers(t *testing.T) {
	const size = 7*LentSize + 12345
	old := bytes.Repeat([]byte{0xEE}, size)
	path, cached := targetFile(t, old)
	direct := openDirect(path)
	if direct == nil {
		t.Skip("skipped: this file system refuses O_DIRECT, and a writer through the page cache lends no buffer")
	}
	w := newDirectWriter(direct, cached)
	defer w.close()

	want := bytes.Clone(old)
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	off := int64(0)
	for round := 0; off < size; round++ {
		b := w.LendBuffer()
		if b == nil {
			t.Fatalf("round %d: no buffer lent", round)
		}
		if len(b) < LentSize || sliceAddr(b)%DirectAlign != 0 {
			t.Fatalf("lent %d bytes at %#x: want at least %d, aligned", len(b), sliceAddr(b), LentSize)
		}
		if again := w.LendBuffer(); again != nil {
			t.Fatal("a second buffer lent while the first is out")
		}
		fill(b)
		// The buffer's bytes go out in pieces, as a sparse writer sends
		// them between runs of zeros: large ones, small ones, one offset
		// so that its memory and its place on the target do not align.
		n := int(min(int64(LentSize), size-off))
		b = b[:n]
		pos := 0
		for pos < len(b) {
			k := min(len(b)-pos, []int{minLentWrite, 3 * minLentWrite, 5000, LentSize}[rng.IntN(4)])
			switch {
			case round%3 == 1 && pos == 0:
				// Skipped: zeroed instead, in order with the writes.
				zoff, zn := off, int64(k)
				if err := w.zero(func() error { return writeZeros(cached, zoff, zn) }); err != nil {
					t.Fatal(err)
				}
				clear(want[off : off+int64(k)])
			case round%3 == 2 && pos == 0 && k > 1:
				// Written from memory a byte off its alignment: copied.
				if err := w.writeAt(b[pos+1:pos+k], off+1); err != nil {
					t.Fatal(err)
				}
				copy(want[off+1:], b[pos+1:pos+k])
			default:
				if err := w.writeAt(b[pos:pos+k], off); err != nil {
					t.Fatal(err)
				}
				copy(want[off:], b[pos:pos+k])
			}
			pos += k
			off += int64(k)
		}
		w.ReturnBuffer(b[:0])
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	requireContent(t, path, want)
	if w.uncopied == 0 {
		t.Fatal("no byte went to the disk from a lent buffer")
	}
	if w.lentMade > maxLent {
		t.Fatalf("%d buffers made, want at most %d", w.lentMade, maxLent)
	}
}

// A writer whose disk has failed lends nothing more, and taking back a
// buffer it lent does not wait on the failed disk.
func TestDirectWriterLendsNothingOnceFailed(t *testing.T) {
	path, cached := targetFile(t, make([]byte, 4*LentSize))
	direct := openDirect(path)
	if direct == nil {
		t.Skip("skipped: this file system refuses O_DIRECT")
	}
	direct.Close()
	w := newDirectWriter(direct, cached) // every direct write fails
	defer w.close()
	for i := range 2 * maxLent {
		b := w.LendBuffer()
		if b == nil {
			if i == 0 {
				t.Fatal("no buffer lent before any failure")
			}
			break
		}
		w.writeAt(b[:LentSize], int64(i)*LentSize)
		w.ReturnBuffer(b)
		if i == 2*maxLent-1 {
			t.Fatal("buffers still lent after the writes failed")
		}
	}
	if err := w.flush(); err == nil {
		t.Fatal("flush after failed writes succeeded")
	}
}
