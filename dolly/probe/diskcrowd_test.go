package probe

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

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
	}{
		{"file", false, false},
		{"block device, O_DIRECT", true, false},
		{"block device, buffered", true, true},
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
			c, err := StartDiskCrowd(path, tt.buffered)
			if err != nil {
				t.Fatal(err)
			}
			const window = 100 * time.Millisecond
			// Pushed twice, as a disk measured again is: the second push
			// counts as the first did.
			for push := 1; push <= 2; push++ {
				n, took, err := c.PushFor(20*time.Millisecond, window)
				if err != nil {
					c.Close()
					t.Fatalf("push %d: %v", push, err)
				}
				if n <= 0 || took < window {
					t.Fatalf("push %d: counted %d bytes on the disk in %v, want some in at least %v", push, n, took, window)
				}
				// It counted from where the writer kept pace with the disk,
				// not while it was filling its write-behind.
				select {
				case <-c.steady:
				default:
					t.Errorf("push %d: the window opened before the writer was steady", push)
				}
				// The machine was busy writing: its time over the window shows.
				if cpu := c.WindowCPU(); cpu <= 0 || cpu > time.Duration(runtime.NumCPU())*2*took {
					t.Errorf("push %d: the machine's busy time over the window: %v, want some, at most every core's for %v", push, cpu, took)
				}
			}
			c.Close()
			if got, _ := testimage.SHA256(target, -1); got != want {
				t.Fatalf("the disk crowd changed the target: sha256 %.16s, was %.16s", got, want)
			}
			if after := runtime.NumGoroutine(); after > before+1 {
				t.Errorf("%d goroutines before, %d after", before, after)
			}
		})
	}
}

// A mounted block device is in use: the disk crowd leaves it alone.
func TestDiskCrowdLeavesAMountedDeviceAlone(t *testing.T) {
	c, err := StartDiskCrowd(mountedDevice(t), false)
	if err == nil {
		c.Close()
		t.Fatal("a disk crowd started on a mounted device")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error %q does not say the device is in use", err)
	}
}
