package stream

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"

	"dolly/imaging"
)

// CompressChunks stores an image as a cast takes it best: it decodes to
// the image, every byte of data in a frame a node decodes whole, and it
// returns the image's digest. A cancelled context stops it.
func TestCompressChunksStoresFramesDecodedWhole(t *testing.T) {
	// Text-like data, a long zero run, and an end that is not a chunk.
	var img []byte
	for i := 0; len(img) < 5*imaging.ChunkSize; i++ {
		img = append(img, []byte("block "+string(rune('a'+i%26))+" of the golden image\n")...)
	}
	img = append(img, make([]byte, 3*imaging.ChunkSize+12345)...)
	img = append(img, []byte("the end")...)
	// Each chunk's zero runs are found apart, as the compressor does.
	var data int64
	for off := 0; off < len(img); off += imaging.ChunkSize {
		chunk := img[off:min(off+imaging.ChunkSize, len(img))]
		imaging.Segments(chunk, int64(off), imaging.MinZeroRun, off+len(chunk) == len(img), func(s imaging.Segment) {
			if !s.Zero {
				data += int64(s.Len)
			}
		})
	}

	for _, level := range []imaging.Level{imaging.OnTheFly, imaging.Stored} {
		var out bytes.Buffer
		digest, err := CompressChunks(context.Background(), &out, bytes.NewReader(img), imaging.Zstd, level)
		if err != nil {
			t.Fatal(err)
		}
		d := imaging.NewDigester()
		d.Write(img)
		if digest != d.Sum() {
			t.Errorf("level %d: the digest is not the image's", level)
		}
		dec, _ := zstd.NewReader(nil)
		got, err := dec.DecodeAll(out.Bytes(), nil)
		dec.Close()
		if err != nil || !bytes.Equal(got, img) {
			t.Fatalf("level %d: the stored image does not decode to the image (%v)", level, err)
		}
		c, err := imaging.CountZstd(bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if c.Whole != data {
			t.Errorf("level %d: %d bytes in frames decoded whole, want the %d of data", level, c.Whole, data)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CompressChunks(ctx, &bytes.Buffer{}, bytes.NewReader(img), imaging.Zstd, imaging.Stored); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v, want context.Canceled", err)
	}
}
