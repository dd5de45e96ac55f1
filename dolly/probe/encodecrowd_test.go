package probe

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"dolly/imaging"
	"dolly/internal/testimage"
)

func TestEncodeCrowd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the encoder is timed by its thread's clock, which only Linux reads here")
	}
	rawPath, im := openTestImage(t, 24<<20, 5, testimage.Typical)
	p, err := Image(t.Context(), im, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewEncodeCrowd(t.Context(), im, &p)
	if err != nil || c == nil {
		t.Fatalf("NewEncodeCrowd: %v, %v", c, err)
	}
	if n, most := len(c.pieces), encodeCrowdChunks*imaging.ChunkSize/encodeCrowdPiece; n == 0 || n > most {
		t.Fatalf("%d pieces held, want 1 to %d", n, most)
	}
	// The pieces are the image's bytes where it says, each timed alone.
	for i, chunk := range c.pieces {
		want := make([]byte, len(chunk))
		if _, err := im.ReadAt(want, c.offs[i]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(chunk, want) {
			t.Errorf("piece %d is not the image's bytes at %d", i, c.offs[i])
		}
		if c.alone[i] <= 0 {
			t.Errorf("piece %d timed alone at %v", i, c.alone[i])
		}
	}
	// Alone again, the encoder costs what it cost alone, give or take
	// the machine's moments: a ratio of the same chunks' times.
	slowdown, err := c.PushFor(5*time.Millisecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if slowdown < 0.25 || slowdown > 4 {
		t.Errorf("the encoder alone again took %.2f× its time alone", slowdown)
	}

	// A compressed image is not compressed again: nothing to time.
	if err := testimage.Compress(rawPath, rawPath+".zst", imaging.Zstd); err != nil {
		t.Fatal(err)
	}
	zst, err := imaging.OpenImage(rawPath + ".zst")
	if err != nil {
		t.Fatal(err)
	}
	defer zst.Close()
	q, err := Image(t.Context(), zst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := NewEncodeCrowd(t.Context(), zst, &q); c != nil || err != nil {
		t.Errorf("compressed image: %v, %v; want nothing to time", c, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := NewEncodeCrowd(ctx, im, &p); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
