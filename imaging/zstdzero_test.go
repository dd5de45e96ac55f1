package imaging

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os/exec"
	"testing"
)

// runWriter records what reaches it as bytes and as runs of zeros.
type runWriter struct {
	b    []byte
	runs []int64
}

func (w *runWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *runWriter) WriteZeros(n int64) error {
	w.b = append(w.b, make([]byte, n)...)
	w.runs = append(w.runs, n)
	return nil
}

func (w *runWriter) zeros() (n int64) {
	for _, r := range w.runs {
		n += r
	}
	return n
}

// TestZstdZeroFrames: a zero frame is a zstd frame of its zeros to any
// decoder (klauspost's, zstd's own tool), and a cast's decoder hands it on
// as one run, never as bytes.
func TestZstdZeroFrames(t *testing.T) {
	tool, _ := exec.LookPath("zstd")
	for _, n := range []int64{1, 4095, ZeroBlock, zstdMaxBlock, zstdMaxBlock + 1, ChunkSize, 5<<20 + 3, ZstdZeroFrameMax + 7} {
		frame := AppendZstdZeros(nil, n)
		want := make([]byte, n)
		got, err := plainDecode(frame)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d zeros: klauspost's decoder gives %d bytes, %v", n, len(got), err)
		}
		if tool != "" {
			cmd := exec.Command(tool, "-q", "-d", "-c")
			cmd.Stdin = bytes.NewReader(frame)
			got, err := cmd.Output()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%d zeros: zstd -d gives %d bytes, %v", n, len(got), err)
			}
		}
		d, err := NewStreamDecoder(Zstd, bytes.NewReader(frame))
		if err != nil {
			t.Fatal(err)
		}
		var w runWriter
		if _, err := io.Copy(&w, d); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w.b, want) || w.zeros() != n {
			t.Fatalf("%d zeros: the stream decoder gives %d bytes, %d of them as runs %v", n, len(w.b), w.zeros(), w.runs)
		}
	}
	if tool == "" {
		t.Log("zstd's tool is not installed: zero frames checked with klauspost's decoder only")
	}
}

// TestZstdStreamKeepsRunsInPlace decodes a stream of data frames, zero
// frames and frames that only look like them, as a node does (WriteTo a
// ZeroWriter), through Read in odd pieces, and as it is: all alike.
func TestZstdStreamKeepsRunsInPlace(t *testing.T) {
	data := make([]byte, 3<<20)
	mixedData(data)
	ones := AppendZstdZeros(nil, 300<<10)
	ones[len(ones)-1] = 1 // the last block repeats 1: no zero frame
	short := AppendZstdZeros(nil, 8192)
	skippable := []byte{0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'}
	stream := bytes.Join([][]byte{
		AppendZstdZeros(nil, 70000),
		encodeAll(t, data[:1<<20]),
		AppendZstdZeros(nil, 1<<20),
		AppendZstdZeros(nil, 12345),
		encodeAll(t, data[1<<20:2<<20]),
		ones,
		skippable,
		short,
		rleFrameOf(t, 0, 4096, 4096), // zeros, but not in the canonical form
		encodeAll(t, data[2<<20:]),
		AppendZstdZeros(nil, 3),
	}, nil)
	want, err := plainDecode(stream)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(want, bytes.Repeat([]byte{1}, 1000)) {
		t.Fatal("the altered zero frame does not decode to ones")
	}
	d, err := NewStreamDecoder(Zstd, bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var w runWriter
	if _, err := io.Copy(&w, d); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(w.b) != sha256.Sum256(want) {
		t.Fatalf("WriteTo gives %d bytes unlike the %d of the stream as it is", len(w.b), len(want))
	}
	if runs := []int64{70000, 1 << 20, 12345, 8192, 3}; !slicesEqual(w.runs, runs) {
		t.Errorf("runs handed on: %v, want %v", w.runs, runs)
	}

	d, err = NewStreamDecoder(Zstd, bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 7777)
	for {
		n, err := d.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("Read gives %d bytes unlike the %d of the stream as it is", len(got), len(want))
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestChunkEncoderZeroRuns: a chunk's zero runs of MinZeroRun and more,
// on whole blocks, become zero frames and its data frames of their own;
// the chunk decodes to itself, and encodes to the same bytes every time.
func TestChunkEncoderZeroRuns(t *testing.T) {
	const off = 6 * ChunkSize
	chunk := make([]byte, ChunkSize)
	mixedData(chunk[:100000])                    // data, then zeros from an unaligned offset
	mixedData(chunk[600<<10 : 600<<10+5000])     // a short run of data
	mixedData(chunk[700<<10 : 700<<10+60000])    // then a zero run too short to count
	mixedData(chunk[760<<10+1000 : ChunkSize-9]) // data to nearly the end
	var zeros int64
	Segments(chunk, off, MinZeroRun, false, func(s Segment) {
		if s.Zero {
			zeros += int64(s.Len)
		}
	})
	if zeros < 500<<10 {
		t.Fatalf("the chunk has only %d bytes of zero runs", zeros)
	}
	enc, err := NewChunkEncoder(Zstd)
	if err != nil {
		t.Fatal(err)
	}
	out, err := enc.Encode(nil, chunk, off, false)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := enc.Encode(nil, chunk, off, false)
	if !bytes.Equal(out, again) {
		t.Fatal("the same chunk encodes to other bytes")
	}
	if got, err := plainDecode(out); err != nil || !bytes.Equal(got, chunk) {
		t.Fatalf("decoded as it is: %d bytes, %v", len(got), err)
	}
	d, err := NewStreamDecoder(Zstd, bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var w runWriter
	if _, err := io.Copy(&w, d); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.b, chunk) || w.zeros() != zeros {
		t.Fatalf("the stream decoder gives %d bytes, %d as runs; want the chunk with %d as runs", len(w.b), w.zeros(), zeros)
	}
}
