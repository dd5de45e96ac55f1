package imaging

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestCompressBytesAsksForASmallWindow checks that CompressBytes writes
// what Compress does, block for block, under a frame header that asks
// for no larger a window than the data, and that it decodes back.
func TestCompressBytesAsksForASmallWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 3<<19)
	for i := 0; i < len(b); i += 64 {
		if rng.IntN(2) == 0 {
			for j := i; j < i+64; j++ {
				b[j] = byte(rng.Uint32())
			}
		}
	}
	var small, plain bytes.Buffer
	if err := CompressBytes(&small, Zstd, b); err != nil {
		t.Fatal(err)
	}
	if err := Compress(&plain, Zstd, bytes.NewReader(b), 1); err != nil {
		t.Fatal(err)
	}
	var smallHdr, plainHdr zstd.Header
	if err := smallHdr.Decode(small.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := plainHdr.Decode(plain.Bytes()); err != nil {
		t.Fatal(err)
	}
	if smallHdr.WindowSize != 2<<20 || smallHdr.WindowSize >= plainHdr.WindowSize {
		t.Errorf("window %d (Compress: %d), want 2 MiB, the power of two that holds 1.5 MiB", smallHdr.WindowSize, plainHdr.WindowSize)
	}
	if small.Len() != plain.Len() || !bytes.Equal(small.Bytes()[smallHdr.HeaderSize:], plain.Bytes()[plainHdr.HeaderSize:]) {
		t.Errorf("blocks differ from Compress's: %d bytes against %d", small.Len(), plain.Len())
	}
	dec, err := NewStreamDecoder(Zstd, &small)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	got, err := io.ReadAll(dec)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("decoded %d bytes (err %v), want the %d written back", len(got), err, len(b))
	}
}
