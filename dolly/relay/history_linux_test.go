package relay

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// minorFaults is how many pages this process has faulted in so far.
func minorFaults(t *testing.T) int64 {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}

// A history from NewHistory has its pages mapped: writing it through, as
// a cast does, faults none of them in again.
func TestNewHistoryIsMapped(t *testing.T) {
	b := NewHistory()
	if len(b) != HistoryBytes {
		t.Fatalf("NewHistory: %d bytes, want %d", len(b), HistoryBytes)
	}
	page := os.Getpagesize()
	pages := int64(len(b) / page)
	before := minorFaults(t)
	for i := 0; i < len(b); i += page {
		b[i] = 1
	}
	// Other goroutines (the test runner's, the runtime's) may fault a few.
	if faults := minorFaults(t) - before; faults > pages/20 {
		t.Fatalf("writing a history from NewHistory faulted %d of its %d pages in", faults, pages)
	}
	// The same loop over fresh memory does fault: the check can fail.
	fresh, err := unix.Mmap(-1, 0, HistoryBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(fresh)
	before = minorFaults(t)
	for i := 0; i < len(fresh); i += page {
		fresh[i] = 1
	}
	if faults := minorFaults(t) - before; faults < pages/20 {
		t.Errorf("fresh memory faulted only %d of its %d pages in: the check above proves nothing here", faults, pages)
	}
}
