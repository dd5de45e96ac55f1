package imaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"dolly/internal/testenv"
)

// A loop device without direct I/O writes through the page cache of the
// file behind it, whatever its writer asked for: the target says so, and
// stops saying so once the device writes directly.
func TestInspectTargetNamesTheFileBehindACachedLoopDevice(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(backing, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := testenv.LoopDevice(t, backing)
	info, err := InspectTarget(dev)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(backing)
	if info.CachedBy != want {
		t.Fatalf("CachedBy = %q, want %q", info.CachedBy, want)
	}
	if out, err := exec.Command("losetup", "--direct-io=on", dev).CombinedOutput(); err != nil {
		t.Skipf("skipped the direct half: this file system takes no direct I/O behind a loop device: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if info, err = InspectTarget(dev); err != nil {
		t.Fatal(err)
	}
	if info.CachedBy != "" {
		t.Errorf("with direct I/O, CachedBy = %q, want none", info.CachedBy)
	}
	file, err := InspectTarget(backing)
	if err != nil {
		t.Fatal(err)
	}
	if file.CachedBy != "" {
		t.Errorf("a regular file: CachedBy = %q, want none", file.CachedBy)
	}
}
