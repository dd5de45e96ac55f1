package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/imaging/blockmap"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// A golden disk (a loop device over a used ext4) is captured to the server
// and cast from there: the golden disk is unchanged, the stored image is a
// fraction of the disk, and on every target each block in use is the
// golden disk's, the file system checks clean and holds the golden file.
func TestCaptureRoundTrip(t *testing.T) {
	dir := t.TempDir()
	const size, keep = 64 << 20, 8 << 20
	golden, kept := dirtyExt4(t, dir, size, keep)
	source := golden
	if os.Geteuid() == 0 {
		source = testenv.LoopDevice(t, golden) // a disk, as on the golden PC
	}
	before, _ := testimage.SHA256(source, -1)
	f, _ := os.Open(golden)
	used, err := blockmap.Read(f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	stored := filepath.Join(dir, "captured.img.zst")
	addr := freePort(t)
	srv := start(t, "dolly-server", "-capture", "-o", stored, "-listen", addr, "-progress-interval", "1s")
	pc := start(t, "dolly", "capture", "-server", addr, "-source", source, "-name", "golden", "-join-timeout", "30s")
	if code := pc.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly capture exited %d:\n%s\nserver:\n%s", code, pc.out.String(), srv.out.String())
	}
	if code := srv.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server -capture exited %d:\n%s", code, srv.out.String())
	}
	for _, want := range []string{"golden: " + source, "ext4", "captured " + source + " of golden"} {
		if !strings.Contains(srv.out.String(), want) {
			t.Errorf("the server does not say %q:\n%s", want, srv.out.String())
		}
	}
	if after, _ := testimage.SHA256(source, -1); after != before {
		t.Fatal("the capture changed the golden disk")
	}
	st, err := os.Stat(stored)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stored + ".partial"); err == nil {
		t.Error("a .partial file is left beside the image")
	}
	t.Logf("captured %d bytes in use of %d into %d bytes", used.UsedBytes(), size, st.Size())
	if st.Size() > used.UsedBytes()*11/10 {
		t.Errorf("the image is %d bytes for %d in use", st.Size(), used.UsedBytes())
	}

	var targets []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("pc%d", i))
		testimage.Fill(p, 0xFF, size)
		targets = append(targets, p)
	}
	r := runCast(t, []string{"-image", stored, "-chain", "-no-probe", "-yes"}, targets, 2*time.Minute)
	if r.code != 0 {
		t.Fatalf("casting the captured image: dolly-server exited %d:\n%s", r.code, r.server.out.String())
	}
	if !strings.Contains(r.server.out.String(), "ext4, as the image's own map says") {
		t.Errorf("the server does not say the image holds its block map:\n%s", r.server.out.String())
	}
	want, _ := os.ReadFile(golden)
	for i, tg := range targets {
		got, _ := os.ReadFile(tg)
		for _, e := range used.Used {
			if !bytes.Equal(got[e.Off:e.End()], want[e.Off:e.End()]) {
				t.Errorf("pc%02d: the used blocks at %d..%d differ from the golden disk's", i+1, e.Off, e.End())
				break
			}
		}
		if out, err := exec.Command("e2fsck", "-fn", tg).CombinedOutput(); err != nil {
			t.Errorf("pc%02d: e2fsck -fn: %v\n%s", i+1, err, out)
		}
		dump := filepath.Join(dir, fmt.Sprintf("dump%d", i))
		testenv.Run(t, "debugfs", "-R", "dump etc/keep "+dump, tg)
		if got, _ := os.ReadFile(dump); !bytes.Equal(got, kept) {
			t.Errorf("pc%02d: etc/keep differs from the golden file", i+1)
		}
	}

	// The image is not overwritten, and a node that comes to join a cast
	// is told where it is.
	srv = start(t, "dolly-server", "-capture", "-o", stored, "-listen", freePort(t))
	if code := srv.wait(t, 10*time.Second); code != 3 || !strings.Contains(srv.out.String(), "exists") {
		t.Errorf("capturing over an existing image: exit %d:\n%s", code, srv.out.String())
	}
	addr = freePort(t)
	srv = start(t, "dolly-server", "-capture", "-o", filepath.Join(dir, "other.img.zst"), "-listen", addr)
	node := start(t, "dolly", "-server", addr, "-target", targets[0], "-join-timeout", "30s")
	if code := node.wait(t, 30*time.Second); code == 0 || !strings.Contains(node.out.String(), "dolly capture") {
		t.Errorf("a node joining a capture: exit %d:\n%s", code, node.out.String())
	}
}

// With -key, only a PC holding the key file may send the image, and it
// sends only to a server holding it; both see why when the keys differ.
func TestCaptureWithAKey(t *testing.T) {
	dir := t.TempDir()
	golden, _ := dirtyExt4(t, dir, 16<<20, 1<<20)
	keys := []string{filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")}
	for _, k := range keys {
		if code := start(t, "dolly", "key", "-o", k).wait(t, 10*time.Second); code != 0 {
			t.Fatal("dolly key failed")
		}
	}
	capture := func(serverKey, nodeKey, out string) (*proc, *proc) {
		addr := freePort(t)
		srv := start(t, "dolly-server", "-capture", "-o", out, "-listen", addr, "-key", serverKey)
		pc := start(t, "dolly", "capture", "-server", addr, "-source", golden, "-key", nodeKey, "-join-timeout", "30s")
		pc.wait(t, time.Minute)
		return srv, pc
	}
	out := filepath.Join(dir, "keyed.img.zst")
	srv, pc := capture(keys[0], keys[0], out)
	if code := srv.wait(t, time.Minute); code != 0 || pc.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("keyed capture: server %d, node %d\n%s\n%s", code, pc.cmd.ProcessState.ExitCode(), srv.out.String(), pc.out.String())
	}
	srv, pc = capture(keys[0], keys[1], filepath.Join(dir, "other.img.zst"))
	if pc.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(pc.out.String(), "authentication failed") {
		t.Errorf("a capture under another key: exit %d\n%s", pc.cmd.ProcessState.ExitCode(), pc.out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "other.img.zst")); err == nil {
		t.Error("an image was stored from a PC without the key")
	}
}
