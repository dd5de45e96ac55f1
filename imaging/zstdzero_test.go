package imaging

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
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
		w := nodeDecode(t, frame)
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
	w := nodeDecode(t, stream)
	if sha256.Sum256(w.b) != sha256.Sum256(want) {
		t.Fatalf("WriteTo gives %d bytes unlike the %d of the stream as it is", len(w.b), len(want))
	}
	if runs := []int64{70000, 1 << 20, 12345, 8192, 3}; !slicesEqual(w.runs, runs) {
		t.Errorf("runs handed on: %v, want %v", w.runs, runs)
	}

	d, err := NewStreamDecoder(Zstd, bytes.NewReader(stream))
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

// nodeDecode decodes stream as a node does: WriteTo a ZeroWriter.
func nodeDecode(t *testing.T, stream []byte) *runWriter {
	t.Helper()
	d, err := NewStreamDecoder(Zstd, bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var w runWriter
	if _, err := io.Copy(&w, d); err != nil {
		t.Fatal(err)
	}
	return &w
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
	enc, err := NewChunkEncoder(Zstd, OnTheFly)
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
	w := nodeDecode(t, out)
	if !bytes.Equal(w.b, chunk) || w.zeros() != zeros {
		t.Fatalf("the stream decoder gives %d bytes, %d as runs; want the chunk with %d as runs", len(w.b), w.zeros(), zeros)
	}
}

// windowFrame is a frame with a window of 128 KiB and a content size, of
// the given blocks: a positive size is a raw block of that many bytes of
// data, a negative one an RLE block of that many zeros.
func windowFrame(blocks ...int) ([]byte, []byte) {
	var raw []byte
	var size int
	for _, b := range blocks {
		size += max(b, -b)
	}
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x80, 7 << 3}
	f = binary.LittleEndian.AppendUint32(f, uint32(size))
	for i, b := range blocks {
		last := uint32(0)
		if i == len(blocks)-1 {
			last = 1
		}
		if b > 0 {
			data := make([]byte, b)
			mixedData(data)
			raw = append(raw, data...)
			head := uint32(b)<<3 | zstdBlockRaw<<1 | last
			f = append(append(f, byte(head), byte(head>>8), byte(head>>16)), data...)
			continue
		}
		raw = append(raw, make([]byte, -b)...)
		head := uint32(-b)<<3 | zstdBlockRLE<<1 | last
		f = append(f, byte(head), byte(head>>8), byte(head>>16), 0)
	}
	return f, raw
}

// TestStreamDecoderSkipsDeepZeros: once the decoder's window is all
// zeros, a stream decoder hands further RLE blocks of zero on as runs, in
// place, without the decoder; the frame's last block still goes through
// it, and the output is the frame's, however it is read.
func TestStreamDecoderSkipsDeepZeros(t *testing.T) {
	const w = 128 << 10
	frame, raw := windowFrame(1000, -w, -w, -w, -w, 5000, -w, -w/2, -w, 77, -w, -w, -w)
	if got, err := plainDecode(frame); err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("the frame decodes as it is to %d bytes, %v", len(got), err)
	}
	rw := nodeDecode(t, frame)
	if !bytes.Equal(rw.b, raw) {
		t.Fatalf("the stream decoder gives %d bytes unlike the frame's %d", len(rw.b), len(raw))
	}
	// Skipped: 3 blocks after the first window of zeros; w/2 and w after
	// the next first window; 1 before the last block.
	if want := []int64{3 * w, w/2 + w, w}; !slicesEqual(rw.runs, want) {
		t.Errorf("runs handed on: %v, want %v", rw.runs, want)
	}
	// Cut in the middle of the skipped zeros: an error, not a short
	// output.
	cut, err := NewStreamDecoder(Zstd, bytes.NewReader(frame[:len(frame)-6]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(&runWriter{}, cut); err == nil {
		t.Error("a frame cut short among skipped zeros decoded without an error")
	}
	for _, open := range []func(Encoding, io.Reader) (io.ReadCloser, error){NewStreamDecoder, NewDecoder} {
		d, err := open(Zstd, bytes.NewReader(frame))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(d) // Read: nothing skipped
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("Read gives %d bytes, %v; want the frame's %d", len(got), err, len(raw))
		}
	}
}

// TestStreamDecoderSkipsDeepZerosOfZstdsTool decodes what zstd's tool
// writes of an image whose data after a long run of free space matches
// into it.
func TestStreamDecoderSkipsDeepZerosOfZstdsTool(t *testing.T) {
	tool, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("needs zstd's tool (apt-get install zstd)")
	}
	raw := make([]byte, 40<<20)
	mixedData(raw[:2<<20])
	for off := 30 << 20; off < 34<<20; off += 8192 {
		mixedData(raw[off : off+3000]) // data with short gaps of zeros
	}
	copy(raw[36<<20:], raw[:1<<20])
	in := filepath.Join(t.TempDir(), "part.img")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{"-1", "-3", "-19"} {
		if out, err := exec.Command(tool, "-q", "-f", level, in, "-o", in+".zst").CombinedOutput(); err != nil {
			t.Fatalf("zstd: %v: %s", err, out)
		}
		stream, err := os.ReadFile(in + ".zst")
		if err != nil {
			t.Fatal(err)
		}
		rw := nodeDecode(t, stream)
		if sha256.Sum256(rw.b) != sha256.Sum256(raw) {
			t.Fatalf("zstd %s: decoded %d bytes unlike the image", level, len(rw.b))
		}
		if rw.zeros() < 20<<20 {
			t.Errorf("zstd %s: only %d bytes of zeros went past the decoder", level, rw.zeros())
		}
		t.Logf("zstd %s: %d of %d bytes went past the decoder as zeros", level, rw.zeros(), len(raw))
	}
}

// TestSkippingHeader: a frame loses its content size for the decoder only
// where zeros may be skipped, past its window.
func TestSkippingHeader(t *testing.T) {
	big, _ := windowFrame(1000, -128<<10, -128<<10)                      // content past the window
	small, _ := windowFrame(1000, -4096)                                 // content within it
	noSize := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3}, 0, 0) // no content size, a window
	for _, tc := range []struct {
		name  string
		frame []byte
		ok    bool
		want  []byte
	}{
		{"past its window: the size goes", big, true, []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3}},
		{"within its window: kept", small, false, nil},
		{"no content size: as it is", noSize, true, noSize[:6]},
		{"a single segment: kept", AppendZstdZeros(nil, 1<<20), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h zstd.Header
			if err := h.Decode(tc.frame); err != nil {
				t.Fatal(err)
			}
			got, ok := skippingHeader(h, tc.frame[:h.HeaderSize])
			if ok != tc.ok || !bytes.Equal(got, tc.want) {
				t.Errorf("skippingHeader = % x, %v; want % x, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
