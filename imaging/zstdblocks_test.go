package imaging

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestZstdRLEStreamDecodesToZeros(t *testing.T) {
	s, err := ZstdRLEStream(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(Zstd, bytes.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := io.ReadAll(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1<<20 || !bytes.Equal(got, make([]byte, 1<<20)) {
		t.Fatalf("decoded %d bytes, want 1 MiB of zeros", len(got))
	}
}

func TestZstdRLEBytes(t *testing.T) {
	rle, err := ZstdRLEStream(512 << 10)
	if err != nil {
		t.Fatal(err)
	}
	var packed bytes.Buffer
	data := bytes.Repeat([]byte("a filesystem's files, "), 40000)
	if err := Compress(&packed, Zstd, bytes.NewReader(data), 1); err != nil {
		t.Fatal(err)
	}
	// A skippable frame: magic 0x184D2A50, its size, its payload.
	skippable := []byte{0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3}
	const w = 128 << 10
	deep, _ := windowFrame(1000, -w, -w, -w, 9, -w, -w, -4096, -w)
	for _, tc := range []struct {
		name          string
		stream        []byte
		want, skipped int64
		err           string
	}{
		// A window of 128 KiB: after the first block of zeros, all but
		// the last are skipped.
		{"RLE blocks only", rle, 512 << 10, 256 << 10, ""},
		{"no RLE blocks", packed.Bytes(), 0, 0, ""},
		{"frames one after another", concat(packed.Bytes(), rle, skippable, rle), 1 << 20, 512 << 10, ""},
		{"runs of zeros with data between", deep, 6*w + 4096, 3*w + 4096, ""},
		{"zero frames: no decoder reads them", concat(AppendZstdZeros(nil, 5<<20), rle), 512 << 10, 256 << 10, ""},
		{"truncated in a block", rle[:len(rle)-5], 0, 0, "reading an RLE block"},
		{"not zstd", []byte(strings.Repeat("not a zstd frame", 4)), 0, 0, "frame at 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped, err := ZstdRLEBytes(bytes.NewReader(tc.stream), int64(len(tc.stream)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || skipped != tc.skipped {
				t.Errorf("%d bytes from RLE blocks, %d of them skipped; want %d, %d skipped", got, skipped, tc.want, tc.skipped)
			}
			// What the stream decoder skips, counted as it goes.
			rw := nodeDecode(t, tc.stream)
			var frames int64
			for _, r := range rw.runs {
				frames += r
			}
			if frames-zeroFrameBytes(tc.stream) != tc.skipped {
				t.Errorf("the stream decoder skipped %d bytes of RLE blocks, the walk says %d", frames-zeroFrameBytes(tc.stream), tc.skipped)
			}
		})
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// zeroFrameBytes is what the zero frames at the start of stream stand for.
func zeroFrameBytes(stream []byte) (n int64) {
	for {
		size, run, ok := zstdZeroFrame(stream)
		if !ok {
			return n
		}
		n += run
		stream = stream[size:]
	}
}

// CountZstd counts what lies in frames a cast decodes whole: those a
// source compressing on the fly (or a capture) makes, not the zero frames
// between them nor the large frames of zstd's own tool.
func TestCountZstdWhole(t *testing.T) {
	chunks := func(image []byte) []byte { return chunksCompressed(t, image) }
	text := bytes.Repeat([]byte("a cast of a chunk at a time "), (5<<20)/28)
	withZeros := append(bytes.Clone(text[:3<<20]), make([]byte, 2<<20)...)
	var big bytes.Buffer // one frame of the whole, as zstd's tool writes it
	if err := Compress(&big, Zstd, bytes.NewReader(text), 1); err != nil {
		t.Fatal(err)
	}
	rle, err := ZstdRLEStream(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		whole  int64
	}{
		{"chunks of data", chunks(text), int64(len(text))},
		{"chunks with a zero run", chunks(withZeros), 3 << 20},
		{"one large frame", big.Bytes(), 0},
		{"RLE blocks, no content size", rle, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := CountZstd(bytes.NewReader(tc.stream), int64(len(tc.stream)))
			if err != nil {
				t.Fatal(err)
			}
			if c.Whole != tc.whole {
				t.Fatalf("%d bytes in frames decoded whole, want %d", c.Whole, tc.whole)
			}
		})
	}
}
