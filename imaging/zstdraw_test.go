package imaging

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// plainDecode decodes b with klauspost's decoder as it comes, without
// rleAsRaw in front: what every stream must decode to.
func plainDecode(b []byte) ([]byte, error) {
	d, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(MaxZstdWindow), zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return io.ReadAll(d)
}

func ourDecode(b []byte) ([]byte, error) {
	d, err := NewDecoder(Zstd, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return io.ReadAll(d)
}

// rleFrameOf is a frame, without a checksum, of blocks of byte v repeated,
// as RLE blocks of the given sizes.
func rleFrameOf(t *testing.T, v byte, sizes ...int) []byte {
	t.Helper()
	h := zstd.Header{WindowSize: zstdMaxBlock}
	out, err := h.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range sizes {
		head := uint32(size)<<3 | zstdBlockRLE<<1
		if i == len(sizes)-1 {
			head |= 1
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], head)
		out = append(out, b[0], b[1], b[2], v)
	}
	return out
}

func encodeAll(t *testing.T, data []byte, opts ...zstd.EOption) []byte {
	t.Helper()
	e, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return e.EncodeAll(data, nil)
}

func TestRLEAsRawDecodesAlike(t *testing.T) {
	data := make([]byte, 3<<20)
	mixedData(data)
	free, err := ZstdRLEStream(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	skippable := []byte{0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'}
	cases := []struct {
		name   string
		stream []byte
	}{
		{"free space as zstd's tool writes it", free},
		{"RLE blocks of another byte, odd sizes", rleFrameOf(t, 0xab, 1, 4096, zstdMaxBlock, 77)},
		{"two bytes in turn", append(rleFrameOf(t, 7, 1000, 2000), rleFrameOf(t, 9, 3000)...)},
		{"an empty RLE block", rleFrameOf(t, 0, 0)},
		{"data with a checksum", encodeAll(t, data)},
		{"data, free space, a skippable frame, data",
			bytes.Join([][]byte{encodeAll(t, data[:1<<20]), free, skippable, encodeAll(t, data[1<<20:], zstd.WithEncoderCRC(false))}, nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := plainDecode(c.stream)
			if err != nil {
				t.Fatalf("the stream does not decode as it is: %v", err)
			}
			got, err := ourDecode(c.stream)
			if err != nil {
				t.Fatalf("decoding through rleAsRaw: %v", err)
			}
			if sha256.Sum256(got) != sha256.Sum256(want) {
				t.Fatalf("decoded %d bytes unlike the %d of the stream as it is", len(got), len(want))
			}
			rewritten, err := io.ReadAll(newRLEAsRaw(bytes.NewReader(c.stream)))
			if err != nil {
				t.Fatal(err)
			}
			rle, _, err := ZstdRLEBytes(bytes.NewReader(rewritten), int64(len(rewritten)))
			if err != nil {
				t.Fatalf("the rewritten stream: %v", err)
			}
			if rle != 0 {
				t.Fatalf("%d bytes still decode from RLE blocks", rle)
			}
		})
	}
}

// TestRLEAsRawOnZstdsOwnImage decodes what zstd's tool writes of an image
// with free space, checksum included.
func TestRLEAsRawOnZstdsOwnImage(t *testing.T) {
	tool, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("needs zstd's tool (apt-get install zstd)")
	}
	raw := make([]byte, 8<<20)
	mixedData(raw[1<<20 : 3<<20])
	mixedData(raw[6<<20 : 7<<20])
	for i := 5 << 20; i < 5<<20+300<<10; i++ {
		raw[i] = 0xff
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "part.img")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "-q", "-3", in, "-o", in+".zst").CombinedOutput(); err != nil {
		t.Fatalf("zstd: %v: %s", err, out)
	}
	stream, err := os.ReadFile(in + ".zst")
	if err != nil {
		t.Fatal(err)
	}
	rle, _, err := ZstdRLEBytes(bytes.NewReader(stream), int64(len(stream)))
	if err != nil || rle < 4<<20 {
		t.Fatalf("zstd's tool wrote %d bytes as RLE blocks (%v); the test needs its free space so", rle, err)
	}
	got, err := ourDecode(stream)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(raw) {
		t.Fatalf("decoded %d bytes unlike the image", len(got))
	}
}

// TestRLEAsRawLeavesDamageToTheDecoder: a damaged stream fails as it
// would without the rewriting, with the decoder's own error.
func TestRLEAsRawLeavesDamageToTheDecoder(t *testing.T) {
	good := rleFrameOf(t, 0, zstdMaxBlock, zstdMaxBlock)
	tooLarge := rleFrameOf(t, 0, zstdMaxBlock+1)
	reserved := rleFrameOf(t, 0, 4096)
	reserved[len(reserved)-4] |= 3 << 1
	cases := []struct {
		name   string
		stream []byte
	}{
		{"cut in a block header", good[:len(good)-2]},
		{"cut before the RLE byte", good[:len(good)-1]},
		{"cut in the frame header", good[:5]},
		{"an RLE block over 128 KiB", tooLarge},
		{"a reserved block type", reserved},
		{"garbage after the frame", append(append([]byte{}, good...), "garbage!"...)},
		{"compressed data cut short", encodeAll(t, bytes.Repeat([]byte("dolly "), 50000))[:1000]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, want := plainDecode(c.stream)
			if want == nil {
				t.Fatal("the damaged stream decodes as it is")
			}
			_, err := ourDecode(c.stream)
			if err == nil {
				t.Fatalf("decoded through rleAsRaw; as it is: %v", want)
			}
			if err.Error() != want.Error() {
				t.Errorf("error %q, as it is %q", err, want)
			}
		})
	}
}

// FuzzRLEAsRaw: any input decodes through rleAsRaw to what it decodes to
// as it is, or fails in both.
func FuzzRLEAsRaw(f *testing.F) {
	free, _ := ZstdRLEStream(300 << 10)
	f.Add(free)
	f.Add(encodeAllF(bytes.Repeat([]byte("dolly"), 1000)))
	f.Add(append(encodeAllF([]byte("a")), free...))
	f.Add(bytes.Join([][]byte{AppendZstdZeros(nil, 70000), encodeAllF([]byte("dolly")), AppendZstdZeros(nil, 3)}, nil))
	deep, _ := windowFrame(100, -128<<10, -128<<10, -4096, 9, -128<<10)
	f.Add(deep)
	f.Fuzz(func(t *testing.T, stream []byte) {
		want, wantErr := plainDecode(stream)
		got, err := ourDecode(stream)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("through rleAsRaw: %v; as it is: %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("decoded %d bytes unlike the %d as it is", len(got), len(want))
		}
		// As a node decodes (WriteTo, zeros deep in a run skipped): what
		// decodes as it is decodes alike. It checks neither the content
		// size nor the checksum, which the cast's digest stands for.
		if wantErr != nil {
			return
		}
		d, err := NewStreamDecoder(Zstd, bytes.NewReader(stream))
		if err != nil {
			t.Fatal(err)
		}
		var w runWriter
		if _, err := io.Copy(&w, d); err != nil || !bytes.Equal(w.b, want) {
			t.Fatalf("as a node decodes: %d bytes, %v; as it is: %d", len(w.b), err, len(want))
		}
	})
}

func encodeAllF(data []byte) []byte {
	e, _ := zstd.NewWriter(nil)
	defer e.Close()
	return e.EncodeAll(data, nil)
}

// mixedData fills b with bytes that compress about as a filesystem's
// files do: words drawn at random, with random bytes among them.
func mixedData(b []byte) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"dolly ", "cast ", "chain ", "node ", "\x00\x01", "image "}
	for i := 0; i < len(b); {
		if r.IntN(4) == 0 {
			b[i] = byte(r.Uint32())
			i++
			continue
		}
		i += copy(b[i:], words[r.IntN(len(words))])
	}
}
