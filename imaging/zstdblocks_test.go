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
	for _, tc := range []struct {
		name   string
		stream []byte
		want   int64
		err    string
	}{
		{"RLE blocks only", rle, 512 << 10, ""},
		{"no RLE blocks", packed.Bytes(), 0, ""},
		{"frames one after another", concat(packed.Bytes(), rle, skippable, rle), 1 << 20, ""},
		{"truncated in a block", rle[:len(rle)-5], 0, "block header"},
		{"not zstd", []byte(strings.Repeat("not a zstd frame", 4)), 0, "frame at 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ZstdRLEBytes(bytes.NewReader(tc.stream), int64(len(tc.stream)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%d bytes from RLE blocks, want %d", got, tc.want)
			}
		})
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
