package probe

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// dirtyRoom is how many bytes of writes the page cache takes in before the
// kernel makes writers wait for the disk: vm.dirty_bytes if set, else
// vm.dirty_ratio percent of the memory the cache may use (what
// MemAvailable counts, near enough). 0 if unknown.
func dirtyRoom() float64 {
	return dirtyLimit(readFile("/proc/sys/vm/dirty_bytes"), readFile("/proc/sys/vm/dirty_ratio"), readFile("/proc/meminfo"))
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// dirtyLimit computes dirtyRoom from the three files' contents.
func dirtyLimit(dirtyBytes, dirtyRatio, meminfo []byte) float64 {
	if n, err := strconv.ParseFloat(strings.TrimSpace(string(dirtyBytes)), 64); err == nil && n > 0 {
		return n
	}
	ratio, err := strconv.ParseFloat(strings.TrimSpace(string(dirtyRatio)), 64)
	if err != nil || ratio <= 0 {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0
			}
			return kb * 1024 * ratio / 100
		}
	}
	return 0
}
