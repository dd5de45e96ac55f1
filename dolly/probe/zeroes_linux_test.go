package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"dolly/internal/testenv"
)

// A block device zeroes by writing exactly when its queue (or, for a
// partition, its disk's) takes no write-zeroes command; a file never.
func TestZeroesByWriting(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "disk")
	if err := os.WriteFile(backing, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if zeroesByWriting("/sys", backing) {
		t.Error("a file zeroes by writing")
	}
	dev := testenv.LoopDevice(t, backing)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	cases := []struct {
		name  string
		knob  string // where the fake sysfs keeps write_zeroes_max_bytes
		value string
		want  bool
	}{
		{"no write-zeroes command", "dev/block/" + node + "/queue", "0\n", true},
		{"a write-zeroes command", "dev/block/" + node + "/queue", "33550336\n", false},
		{"a partition of a disk without it", "disk/queue", "0\n", true},
		{"no queue to read", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sys := t.TempDir()
			if err := os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755); err != nil {
				t.Fatal(err)
			}
			if c.knob == "disk/queue" {
				// As sysfs links a partition: dev/block/M:m -> ../../disk/part.
				os.MkdirAll(filepath.Join(sys, "disk", "part"), 0o755)
				os.Symlink("../../disk/part", filepath.Join(sys, "dev", "block", node))
			}
			if c.knob != "" {
				os.MkdirAll(filepath.Join(sys, c.knob), 0o755)
				if err := os.WriteFile(filepath.Join(sys, c.knob, "write_zeroes_max_bytes"), []byte(c.value), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := zeroesByWriting(sys, dev); got != c.want {
				t.Errorf("zeroesByWriting = %v, want %v", got, c.want)
			}
		})
	}
}
