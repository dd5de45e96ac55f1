package blockmap

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEncodeRoundTrip(t *testing.T) {
	for _, m := range []Map{
		{FS: "ext4", BlockSize: 4096, Size: 1 << 30, Used: []Extent{{0, 8192}, {1 << 20, 4096}, {1<<30 - 4096, 4096}}},
		{FS: "swap", BlockSize: 4096, Size: 1 << 20, Used: []Extent{{0, 4096}}},
		{FS: "", BlockSize: 512, Size: 4096},
	} {
		b, err := m.Encode(1 << 20)
		if err != nil {
			t.Fatalf("%s: %v", m.FS, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", m.FS, err)
		}
		if got.FS != m.FS || got.BlockSize != m.BlockSize || got.Size != m.Size || !slices.Equal(got.Used, m.Used) {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

// A map too long for its budget is coarsened: everything used stays used.
func TestEncodeCoarsensToFit(t *testing.T) {
	m := Map{FS: "ntfs", BlockSize: 4096, Size: 1 << 40}
	var off int64
	for i := range int64(100000) {
		m.Used = append(m.Used, Extent{Off: off, Len: 4096})
		off += 4096 * (2 + i%7) // gaps of 1 to 7 blocks
	}
	const limit = 64 << 10
	b, err := m.Encode(limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > limit {
		t.Fatalf("encoded %d bytes, limit %d", len(b), limit)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Used) >= len(m.Used) {
		t.Fatalf("%d extents, not coarsened from %d", len(got.Used), len(m.Used))
	}
	for _, e := range m.Used {
		if start, end := got.NextUsed(e.Off); start != e.Off || end < e.End() {
			t.Fatalf("used extent %+v is not used in the coarse map (next used %d..%d)", e, start, end)
		}
	}
}

func TestDecodeRefusesBadMaps(t *testing.T) {
	good, _ := Map{FS: "ext4", BlockSize: 4096, Size: 1 << 20, Used: []Extent{{0, 4096}, {8192, 4096}}}.Encode(1 << 10)
	past, _ := Map{Size: 1 << 20, Used: []Extent{{1 << 20, 4096}}}.Encode(1 << 10)
	adjacent, _ := Map{Size: 1 << 20, Used: []Extent{{0, 4096}, {4096, 4096}}}.Encode(1 << 10)
	for name, b := range map[string][]byte{
		"empty":      nil,
		"magic":      []byte("XXXX"),
		"truncated":  good[:len(good)-1],
		"trailing":   append(slices.Clone(good), 0),
		"past end":   past,
		"adjacent":   adjacent,
		"huge count": append(slices.Clone(good[:len(good)-5]), 0xff, 0xff, 0xff, 0x7f),
	} {
		if _, err := Decode(b); !errors.Is(err, errBadEncoding) {
			t.Errorf("%s: got %v, want a malformed map", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Map{FS: "ext4", BlockSize: 4096, Size: 1 << 20, Used: []Extent{{0, 4096}, {8192, 4096}}}.Encode(1 << 10)
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		var end int64
		for _, e := range m.Used {
			if e.Len <= 0 || e.Off < end || e.End() > m.Size {
				t.Fatalf("decoded a bad extent %+v (size %d)", e, m.Size)
			}
			end = e.End()
		}
	})
}

// A disk of many partitions names them all; the name is cut to fit.
func TestEncodeLongName(t *testing.T) {
	m := Map{FS: strings.Repeat("GPT disk (FAT32, ext4, NTFS) ", 5), BlockSize: 512, Size: 1 << 20, Used: []Extent{{0, 512}}}
	b, err := m.Encode(1 << 10)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || len(got.FS) > maxFSName || !strings.HasPrefix(m.FS, strings.TrimSuffix(got.FS, "...")) {
		t.Fatalf("decoded %q, %v", got.FS, err)
	}
}
