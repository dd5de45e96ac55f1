package imaging

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"
)

// lendingBuffer is a writer that lends buffers, as a target written with
// O_DIRECT does, and keeps what is written.
type lendingBuffer struct {
	bytes.Buffer
	lent, returned, fromLent int
	out                      []byte
}

func (l *lendingBuffer) LendBuffer() []byte {
	l.lent++
	l.out = AlignedBuffer(LentSize + lentSlack)
	return l.out
}

func (l *lendingBuffer) ReturnBuffer(b []byte) {
	l.returned++
	l.out = nil
}

func (l *lendingBuffer) Write(p []byte) (int, error) {
	if len(p) > 0 && l.out != nil && &p[0] == &l.out[0] {
		l.fromLent++
	}
	return l.Buffer.Write(p)
}

// chunksCompressed is image compressed as a source compresses it on the
// fly, a chunk at a time (ChunkEncoder).
func chunksCompressed(t testing.TB, image []byte) []byte {
	t.Helper()
	enc, err := NewChunkEncoder(Zstd, OnTheFly)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for off := 0; off < len(image); off += ChunkSize {
		end := min(off+ChunkSize, len(image))
		if out, err = enc.Encode(out, image[off:end], int64(off), end == len(image)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// zstdTinyBlocks is a valid zstd frame of content, declared in its header,
// made of raw blocks of one byte each: four bytes of frame a byte.
func zstdTinyBlocks(content []byte) []byte {
	f := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	f = append(f, 2<<6|1<<5) // a 4-byte content size, single segment
	f = binary.LittleEndian.AppendUint32(f, uint32(len(content)))
	for i, b := range content {
		h := uint32(1) << 3 // raw, one byte
		if i == len(content)-1 {
			h |= 1
		}
		f = append(f, byte(h), byte(h>>8), byte(h>>16), b)
	}
	return f
}

// A stream decoded for a writer that lends buffers: frames of a chunk or
// less, as a source compressing on the fly makes them, are decoded whole
// into the lent buffers, every buffer lent is returned, and a frame that
// declares a small size but takes more room than such a frame should (a
// frame of tiny blocks) is streamed instead. The bytes are the image's.
func TestZstdStreamDecodesWholeFramesIntoLentBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	image := make([]byte, 3*ChunkSize+12345)
	for i := range image {
		if i/(64<<10)%3 != 0 { // some of it zero runs, the rest random text
			image[i] = byte('a' + rng.IntN(8))
		}
	}
	packed := chunksCompressed(t, image)
	tiny := image[:1<<20] // 4 MiB of frame: past maxWholeFrame
	cases := []struct {
		name     string
		stream   []byte
		want     []byte
		fromLent bool
	}{
		{"compressed on the fly", packed, image, true},
		{"a frame of tiny blocks", zstdTinyBlocks(tiny), tiny, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dec, err := NewStreamDecoder(Zstd, bytes.NewReader(c.stream))
			if err != nil {
				t.Fatal(err)
			}
			defer dec.Close()
			var out lendingBuffer
			if _, err := io.Copy(&out, dec); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), c.want) {
				t.Fatalf("decoded %d bytes that differ from the image's %d", out.Len(), len(c.want))
			}
			if out.lent == 0 || out.returned != out.lent {
				t.Fatalf("%d buffers lent, %d returned: want some, all returned", out.lent, out.returned)
			}
			if c.fromLent != (out.fromLent > 0) {
				t.Fatalf("%d writes from a lent buffer, want them: %v", out.fromLent, c.fromLent)
			}
		})
	}
}
