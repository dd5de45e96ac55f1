package probe

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"dolly/imaging"
)

// TestProfilePieces profiles an image laid out as a filesystem is, files
// first and free space after: the pieces must tell the stretches apart,
// whether the image is scanned (compressed) or sampled (raw).
func TestProfilePieces(t *testing.T) {
	const size = 128 << 20
	raw := make([]byte, size)
	r := rand.New(rand.NewPCG(7, 7))
	// The first quarter incompressible, the second text-like (a few
	// distinct bytes), the rest zeros.
	for i := range size / 4 {
		raw[i] = byte(r.Uint32() | 1)
	}
	for i := size / 4; i < size/2; i++ {
		raw[i] = "abcd"[r.IntN(4)]
	}
	rawPath := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, enc := range []imaging.Encoding{imaging.Raw, imaging.Zstd} {
		t.Run(enc.String(), func(t *testing.T) {
			p := profileAs(t, rawPath, enc)
			if len(p.Pieces) < 8 || len(p.Pieces) > maxPieces {
				t.Fatalf("%d pieces, want 8 to %d", len(p.Pieces), maxPieces)
			}
			var total int64
			for i, pc := range p.Pieces {
				at := total + pc.Size/2 // the middle of the piece
				total += pc.Size
				t.Logf("piece %d at %d MiB: zero %.3f factor %.2f decode %.0f MB/s", i, at>>20, pc.ZeroFraction, pc.Factor, pc.DecodeRate/1e6)
				if pc.DecodeRate <= 0 {
					t.Errorf("piece %d: decoding not timed", i)
				}
				switch {
				case at < size/4:
					if pc.ZeroFraction != 0 || pc.Factor > 1.1 {
						t.Errorf("piece %d in the random stretch: zero %.3f factor %.2f, want 0 and about 1", i, pc.ZeroFraction, pc.Factor)
					}
				case at < size/2:
					if pc.ZeroFraction != 0 || pc.Factor < 2.5 || pc.Factor > 6 {
						t.Errorf("piece %d in the text stretch: zero %.3f factor %.2f, want 0 and 2.5 to 6", i, pc.ZeroFraction, pc.Factor)
					}
				default:
					if pc.ZeroFraction != 1 || pc.Factor < 100 {
						t.Errorf("piece %d in the free space: zero %.3f factor %.2f, want 1 and over 100", i, pc.ZeroFraction, pc.Factor)
					}
				}
			}
			if total != size {
				t.Errorf("pieces cover %d bytes, want %d", total, size)
			}
		})
	}
}

// A scan fills the RLE zeros a node's decoder skips; its stretches' times
// lose that filling where the zeros lie deep in a run (reads all of zero
// runs), and nowhere else.
func TestDiscountSkipped(t *testing.T) {
	const mib = 1 << 20
	second := time.Second
	fill := 1e-9 // a second a gigabyte
	for _, tc := range []struct {
		name    string
		skipped int64
		fill    float64
		want    []time.Duration // the parts' times after
	}{
		{"nothing skipped", 0, fill, []time.Duration{second, second, second}},
		{"no fill figure", 64 * mib, 0, []time.Duration{second, second, second}},
		// 64 MiB of the two parts' 128 MiB of solid zeros: 32 MiB each.
		{"half the solid zeros", 64 * mib, fill, []time.Duration{second, second - 32*mib, second - 32*mib}},
		// Never more than a part's solid zeros, nor below a tenth.
		{"more than there are", 512 * mib, fill, []time.Duration{second, second - 64*mib, second - 64*mib}},
		{"a fill dearer than the scan", 128 * mib, 1e-7, []time.Duration{second, second / 10, second / 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tally := pieceTally{span: 64 * mib}
			tally.add(0, 64*mib, mib, 20*mib, second)              // files, some zeros
			tally.add(64*mib, 64*mib, 64*mib, 0, second)           // free space
			tally.add(128*mib, 32*mib, 32*mib, 0, second/2)        // free space, read
			tally.add(128*mib+32*mib, 32*mib, 32*mib, 0, second/2) // in two reads
			tally.discountSkipped(tc.skipped, tc.fill)
			for i, p := range tally.parts {
				if p.cpu != tc.want[i] {
					t.Errorf("part %d: %v, want %v", i, p.cpu, tc.want[i])
				}
			}
		})
	}
}
