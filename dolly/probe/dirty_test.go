package probe

import "testing"

func TestDirtyLimit(t *testing.T) {
	meminfo := []byte("MemTotal:       24684084 kB\nMemFree:        23270012 kB\nMemAvailable:   20000000 kB\n")
	for _, c := range []struct {
		name              string
		bytes, ratio, mem string
		want              float64
	}{
		{"ratio of available memory", "0\n", "20\n", string(meminfo), 20000000 * 1024 * 0.20},
		{"dirty_bytes wins", "1073741824\n", "20\n", string(meminfo), 1 << 30},
		{"no meminfo", "0", "20", "", 0},
		{"no ratio", "0", "", string(meminfo), 0},
		{"garbage", "x", "y", "MemAvailable: z kB", 0},
	} {
		if got := dirtyLimit([]byte(c.bytes), []byte(c.ratio), []byte(c.mem)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if dirtyRoom() < 0 {
		t.Error("negative dirty room on this machine")
	}
}
