package imaging

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeDisk records what writing behind asks of the kernel.
type fakeDisk struct {
	calls []string
	fail  error
}

func (d *fakeDisk) start(s span) error {
	d.calls = append(d.calls, fmt.Sprintf("start %d+%d", s.off>>20, s.n>>20))
	return d.fail
}

func (d *fakeDisk) drop(s span) error {
	d.calls = append(d.calls, fmt.Sprintf("drop %d+%d", s.off>>20, s.n>>20))
	return d.fail
}

// Writes are handed to the disk a window at a time, and the oldest
// dropped once more than the lag is on its way; a write elsewhere hands
// over what was open; the end waits for all of it. (Figures in MiB.)
func TestWriteBehind(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		name   string
		writes [][2]int64 // offset, length in MiB
		want   []string
	}{
		{"under a window", [][2]int64{{0, 4}}, []string{"start 0+4", "drop 0+4"}},
		{"windows, then the lag", [][2]int64{{0, 4}, {4, 4}, {8, 4}, {12, 4}, {16, 4}, {20, 4}, {24, 4}, {28, 4}, {32, 4}, {36, 4}},
			[]string{"start 0+8", "start 8+8", "start 16+8", "start 24+8", "start 32+8", "drop 0+8", "drop 8+8", "drop 16+8", "drop 24+8", "drop 32+8"}},
		{"a jump hands over", [][2]int64{{0, 4}, {100, 4}}, []string{"start 0+4", "start 100+4", "drop 0+4", "drop 100+4"}},
		{"one large write", [][2]int64{{0, 64}}, []string{"start 0+64", "drop 0+64"}},
		{"nothing written", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDisk{}
			w := &WriteBehind{disk: d}
			for _, wr := range tt.writes {
				if err := w.Wrote(wr[0]*mib, wr[1]*mib); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.calls, tt.want) {
				t.Errorf("calls\n%q\nwant\n%q", d.calls, tt.want)
			}
		})
	}
}

// A disk that fails fails the write that handed it over, or the end.
func TestWriteBehindFails(t *testing.T) {
	bad := errors.New("EIO")
	w := &WriteBehind{disk: &fakeDisk{fail: bad}}
	if err := w.Wrote(0, behindWindow); !errors.Is(err, bad) {
		t.Errorf("a full window: %v, want %v", err, bad)
	}
	w = &WriteBehind{disk: &fakeDisk{fail: bad}}
	if err := w.Wrote(0, 1); err != nil {
		t.Fatalf("a write under a window reached the disk: %v", err)
	}
	if err := w.Finish(); !errors.Is(err, bad) {
		t.Errorf("the end: %v, want %v", err, bad)
	}
}

// A file target is written behind and still holds every byte.
func TestFileTargetWrittenBehind(t *testing.T) {
	const size = 3*behindLag + 5<<20 + 123
	dir := t.TempDir()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(data)
	want := sha256.Sum256(data)
	path := filepath.Join(dir, "target")
	tg, err := OpenTarget(path, size, TargetOptions{Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	if tg.behind == nil {
		t.Skip("this file system does not write behind")
	}
	for off := 0; off < size; off += 1 << 20 {
		if _, err := tg.WriteAt(data[off:min(off+1<<20, size)], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tg.Sync(); err != nil {
		t.Fatal(err)
	}
	if tg.behind.queued != 0 || tg.behind.open.n != 0 {
		t.Errorf("after Sync %d bytes are still on their way", tg.behind.queued+tg.behind.open.n)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != want {
		t.Errorf("the target's sha256 %x differs from the image's %x", sha256.Sum256(got), want)
	}
}
