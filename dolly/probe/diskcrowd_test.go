package probe

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// A disk crowd rewrites its target the way a cast writes it (through the
// page cache for a file, O_DIRECT for a block device), counts what reached
// the disk, and leaves every byte of the target as it was.
func TestDiskCrowdWritesWithoutChangingTheTarget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipped: the write path is measured on Linux only")
	}
	for _, tt := range []struct {
		name     string
		block    bool
		buffered bool
		lend     bool // the region is read into memory the caller lends
	}{
		{"file", false, false, false},
		{"file, in lent memory", false, false, true},
		{"block device, O_DIRECT", true, false, false},
		{"block device, O_DIRECT, in lent memory", true, false, true},
		{"block device, buffered", true, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "disk")
			if err := testimage.Write(target, 48<<20, 5, testimage.Dense); err != nil {
				t.Fatal(err)
			}
			want, _ := testimage.SHA256(target, -1)
			path := target
			if tt.block {
				path = testenv.LoopDevice(t, target)
			}
			before := runtime.NumGoroutine()
			var mem []byte
			if tt.lend {
				mem = make([]byte, 20<<20)[1:] // not aligned itself
			}
			c, err := StartDiskCrowd(path, tt.buffered, mem)
			if err != nil {
				t.Fatal(err)
			}
			if tt.lend {
				checkLent(t, c.buf, mem)
				whole, err := os.ReadFile(target) // what a loop device shows too
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(whole[c.start:][:len(c.buf)], c.buf) {
					t.Fatal("the lent memory does not hold the region of the target")
				}
			}
			const window = 100 * time.Millisecond
			// Pushed twice, as a disk measured again is: the second push
			// counts as the first did.
			for push := 1; push <= 2; push++ {
				const settle = 20 * time.Millisecond
				pushed := time.Now()
				n, took, err := c.PushFor(settle, window)
				if err != nil {
					c.Close()
					t.Fatalf("push %d: %v", push, err)
				}
				if n <= 0 || took < window {
					t.Fatalf("push %d: counted %d bytes on the disk in %v, want some in at least %v", push, n, took, window)
				}
				// The machine was busy writing: its time over the window shows,
				// and the window is the one PushFor counted over.
				w := c.Window()
				if cpu := w.BusyTo - w.BusyFrom; cpu <= 0 || cpu > time.Duration(runtime.NumCPU())*2*took {
					t.Errorf("push %d: the machine's busy time over the window: %v, want some, at most every core's for %v", push, cpu, took)
				}
				if opened := w.From.Sub(pushed); opened < settle || w.To.Sub(w.From) != took {
					t.Errorf("push %d: the window opened %v after the push, for %v; want at least %v after, for the %v counted", push, opened, w.To.Sub(w.From), settle, took)
				}
			}
			c.Close()
			clear(mem) // the node's again: with -race, nothing of the crowd may touch it now
			if got, _ := testimage.SHA256(target, -1); got != want {
				t.Fatalf("the disk crowd changed the target: sha256 %.16s, was %.16s", got, want)
			}
			if after := runtime.NumGoroutine(); after > before+1 {
				t.Errorf("%d goroutines before, %d after", before, after)
			}
		})
	}
}

// A sparse file's disk crowd writes where a cast writes, in a hole, which
// the file system must allocate: each push allocates blocks of it anew,
// and the file holds the same bytes.
func TestDiskCrowdWritesInAHole(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipped: the write path is measured on Linux only")
	}
	const size, data = 2 << 30, 4 << 20
	target := filepath.Join(t.TempDir(), "disk.img")
	if err := testimage.Write(target, data, 7, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xEE}, data), size-data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want, _ := testimage.SHA256(target, -1)
	blocks := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(target, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks
	}
	allocated := blocks()
	if allocated*512 >= size/2 {
		t.Skipf("skipped: the file system here keeps no holes (%d of %d bytes allocated)", allocated*512, size)
	}
	c, err := StartDiskCrowd(target, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.fresh == 0 {
		t.Skip("skipped: too little free space here to write a hole in")
	}
	if c.fresh < minHole || c.start < data || c.start+c.fresh > size-data {
		t.Fatalf("writes %d bytes from %d: want at least %d within the hole [%d, %d)", c.fresh, c.start, minHole, data, size-data)
	}
	for push := 1; push <= 2; push++ {
		from := c.next
		n, _, err := c.PushFor(20*time.Millisecond, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("push %d: %v", push, err)
		}
		if n <= 0 {
			t.Fatalf("push %d: nothing reached the disk", push)
		}
		// It went on through the hole: what it counted on the disk, at
		// least, went to blocks the file did not have.
		// (Past the end of its hole it writes it again: nothing to tell.)
		if c.next == from {
			t.Fatalf("push %d wrote and stayed at %d of its hole", push, from)
		}
		now := blocks()
		if grew := (now - allocated) * 512; grew < n && c.next > from {
			t.Fatalf("push %d counted %d bytes on the disk (from %d of its hole to %d), and the file grew by %d", push, n, from, c.next, grew)
		}
		allocated = now
	}
	c.Close()
	if got, _ := testimage.SHA256(target, -1); got != want {
		t.Fatalf("the disk crowd changed the target: sha256 %.16s, was %.16s", got, want)
	}
}

// A mounted block device is in use: the disk crowd leaves it alone.
func TestDiskCrowdLeavesAMountedDeviceAlone(t *testing.T) {
	c, err := StartDiskCrowd(mountedDevice(t), false, nil)
	if err == nil {
		c.Close()
		t.Fatal("a disk crowd started on a mounted device")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error %q does not say the device is in use", err)
	}
}

// checkLent fails t unless buf lies within mem, aligned for O_DIRECT.
func checkLent(t *testing.T, buf, mem []byte) {
	t.Helper()
	first, last := uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&mem[len(mem)-1]))
	at := uintptr(unsafe.Pointer(&buf[0]))
	if at < first || at+uintptr(len(buf))-1 > last {
		t.Fatalf("the probe's %d bytes are not in the %d bytes lent to it", len(buf), len(mem))
	}
	if at%imaging.DirectAlign != 0 {
		t.Fatalf("the probe's memory is at %#x, not aligned to %d", at, imaging.DirectAlign)
	}
}
