package imaging

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"dolly/imaging/blockmap"
)

// opLog records what reaches a target.
type opLog struct{ ops []string }

func (l *opLog) WriteAt(p []byte, off int64) (int, error) {
	l.ops = append(l.ops, fmt.Sprintf("write %d+%d", off, len(p)))
	return len(p), nil
}

func (l *opLog) ZeroRange(off, n int64) error {
	l.ops = append(l.ops, fmt.Sprintf("zero %d+%d", off, n))
	return nil
}

type discardLog struct{ opLog }

func (l *discardLog) Discard(off, n int64) error {
	l.ops = append(l.ops, fmt.Sprintf("discard %d+%d", off, n))
	return nil
}

func TestSkipFree(t *testing.T) {
	const mib = 1 << 20
	used := blockmap.Map{Size: 64 * mib, BlockSize: 4096, Used: []blockmap.Extent{{Off: 0, Len: 8192}, {Off: 2 * mib, Len: 4096}}}
	op := func(what string, off, n int64) string { return fmt.Sprintf("%s %d+%d", what, off, n) }
	tests := []struct {
		name    string
		do      func(BlockWriter)
		discard bool
		want    []string
		parts   []blockmap.Extent
	}{
		{"a whole disk's partitions keep their ends zeroed", func(w BlockWriter) { w.ZeroRange(4*mib, 36*mib) }, true,
			[]string{op("discard", 4*mib, 4*mib), op("zero", 8*mib, mib), op("discard", 9*mib, 14*mib), op("zero", 23*mib, mib), op("discard", 24*mib, 16*mib)},
			[]blockmap.Extent{{Off: 8 * mib, Len: 16 * mib}}},
		{"zeros in use are zeroed, free ones discarded but at the edges", func(w BlockWriter) { w.ZeroRange(4096, 64*mib-4096) }, true,
			[]string{op("zero", 4096, 4096), op("zero", 8192, mib-8192), op("discard", mib, mib), op("zero", 2*mib, 4096),
				op("discard", 2*mib+4096, 61*mib-4096), op("zero", 63*mib, mib)}, nil},
		{"free ones left where the target cannot discard", func(w BlockWriter) { w.ZeroRange(0, 64*mib) }, false,
			[]string{op("zero", 0, 8192), op("zero", 8192, mib-8192), op("zero", 2*mib, 4096), op("zero", 63*mib, mib)}, nil},
		{"data is written wherever it lies", func(w BlockWriter) { w.WriteAt(make([]byte, 100), 9000) }, true,
			[]string{"write 9000+100"}, nil},
		{"a range wholly free", func(w BlockWriter) { w.ZeroRange(16*mib, 4096) }, true,
			[]string{op("discard", 16*mib, 4096)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var log *opLog
			var w BlockWriter
			if tc.discard {
				d := &discardLog{}
				log, w = &d.opLog, SkipFree(d, used)
			} else {
				log = &opLog{}
				w = SkipFree(log, used)
			}
			if tc.parts != nil {
				d := &discardLog{}
				log, w = &d.opLog, SkipFree(d, used, tc.parts...)
			}
			tc.do(w)
			if !slices.Equal(log.ops, tc.want) {
				t.Errorf("got %q, want %q", log.ops, tc.want)
			}
		})
	}
}

// A file target gives up discarded pages (a hole), keeps unaligned edges
// as they were, and counts both.
func TestTargetDiscardFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "target")
	old := bytes.Repeat([]byte{0xaa}, 64<<10)
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, direct := range []bool{false, true} {
		tg, err := OpenTarget(path, int64(len(old)), TargetOptions{Direct: direct})
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.Discard(1000, 20000); err != nil {
			t.Fatal(err)
		}
		if err := tg.Sync(); err != nil {
			t.Fatal(err)
		}
		tg.Close()
		got, _ := os.ReadFile(path)
		discarded, left := tg.Freed()
		if discarded == 0 {
			t.Skip("this file system cannot punch holes")
		}
		if discarded != 16384 || left != 20000-16384 {
			t.Errorf("discarded %d and left %d bytes, want 16384 and %d", discarded, left, 20000-16384)
		}
		want := slices.Clone(old)
		clear(want[4096:20480])
		if !bytes.Equal(got, want) {
			t.Errorf("direct=%v: the target does not hold its old bytes around a hole at 4096..20480", direct)
		}
		if err := tg.Discard(60000, 10000); err == nil {
			t.Error("a discard past the image's end was taken")
		}
	}
}
