package lab

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/imaging"
	"dolly/internal/testimage"
)

// TestCaptureInTheLab captures a used ext4 disk (a loop device whose free
// space holds a deleted file's data) from a lab node to the server over a
// 100 Mbit/s link, then casts the captured image to the lab's 4 nodes:
// the golden disk is unchanged, and every target holds each block in use
// of it (and, its free blocks discarded, reads as the golden disk read
// through its block map).
func TestCaptureInTheLab(t *testing.T) {
	requireLab(t)
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: needs %s (e2fsprogs)", tool)
		}
	}
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const size = 64 << 20
	l := newShapedLab(ctx, t, dir, 4, 100)

	golden, err := l.Disk(ctx, "golden", size, 0)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("mke2fs", "-q", "-F", "-b", "4096", "-t", "ext4", golden)
	for name, n := range map[string]int{"old": 30 << 20, "keep": 10 << 20} {
		b := make([]byte, n)
		rand.Read(b)
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
		run("debugfs", "-w", "-R", "write "+filepath.Join(dir, name)+" "+name, golden)
	}
	run("debugfs", "-w", "-R", "rm old", golden)
	before, _ := testimage.SHA256(golden, -1)
	im, err := imaging.OpenImage(golden)
	if err != nil {
		t.Fatal(err)
	}
	m, err := im.ReadMap()
	if err == nil {
		err = im.UseMap(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, im.Stream()); err != nil {
		t.Fatal(err)
	}
	im.Close()
	mapped := hex.EncodeToString(h.Sum(nil))

	addr := l.Server.IP.String() + ":9700"
	stored := filepath.Join(dir, "golden.img.zst")
	c := &labCast{t: t, l: l, dir: dir, bin: bin}
	srv := c.start(ctx, l.Server, "capture-server", filepath.Join(bin, "dolly-server"), "-capture", "-o", stored, "-listen", addr, "-progress-interval", "1s")
	pc := c.start(ctx, l.Nodes[0], "capture", filepath.Join(bin, "dolly"), "capture", "-server", addr, "-source", golden, "-name", "golden", "-join-timeout", "60s")
	if err := pc.Wait(); err != nil {
		t.Fatalf("dolly capture: %v\n%s\nserver:\n%s", err, c.log("capture"), c.log("capture-server"))
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("dolly-server -capture: %v\n%s", err, c.log("capture-server"))
	}
	if after, _ := testimage.SHA256(golden, -1); after != before {
		t.Fatal("the capture changed the golden disk")
	}
	st, _ := os.Stat(stored)
	t.Logf("captured %d bytes in use of %d into %d bytes", m.UsedBytes(), size, st.Size())

	cast := startLabCast(ctx, t, l, bin, dir, stored, size, nil, nil)
	cast.waitVerified(size, mapped)
	if r := cast.readReport(); r.Verified != 4 {
		t.Fatalf("%d of 4 verified\nserver:\n%s", r.Verified, cast.log("server"))
	}
}
