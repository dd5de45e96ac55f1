package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/imaging"
	"dolly/internal/testimage"
)

// dolly-server -serve casts two queued images one after the other without
// a restart, each to the machines of its group; a machine of no group is
// turned away.
func TestServeTwoCasts(t *testing.T) {
	lib, disks := t.TempDir(), t.TempDir()
	const size = 8 << 20
	for i, name := range []string{"first.img", "second.img.zst"} {
		raw := filepath.Join(disks, fmt.Sprint("raw", i))
		if err := testimage.Write(raw, size, uint64(40+i), testimage.Typical); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".zst") {
			if err := testimage.Compress(raw, filepath.Join(lib, name), imaging.Zstd); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Rename(raw, filepath.Join(lib, name)); err != nil {
			t.Fatal(err)
		}
	}
	groups := filepath.Join(disks, "groups")
	os.WriteFile(groups, []byte("lab1: pc01 pc02\n"), 0o644)
	page, listen := freePort(t), freePort(t)
	srv := start(t, "dolly-server", "-serve", "-images", lib, "-groups", groups, "-http", page, "-listen", listen, "-no-probe", "-net-probe", "0")
	for round, image := range []string{"first.img", "second.img.zst"} {
		var queue *proc
		for deadline := time.Now().Add(10 * time.Second); ; {
			queue = start(t, "dolly-server", "cast", "-server", "http://"+page, "-images", lib, "-image", image, "-group", "lab1", "-plan", "chain", "-wait")
			// The service may still be starting: the first try may find no one.
			waitLine(t, queue, "queued cast", "dolly-server cast:")
			if strings.Contains(queue.out.String(), "queued cast") || time.Now().After(deadline) {
				break
			}
		}
		stranger := start(t, "dolly", "-server", listen, "-target", filepath.Join(disks, "stranger"), "-name", "pc09", "-listen-data", "127.0.0.1:0", "-no-probe", "-join-timeout", "30s")
		if code := stranger.wait(t, time.Minute); code != 3 || !strings.Contains(stranger.out.String(), "not in group lab1") {
			t.Errorf("round %d: pc09 of no group exited %d, want 3 and refused:\n%s", round+1, code, stranger.out.String())
		}
		var nodes []*proc
		for i := range 2 {
			nodes = append(nodes, start(t, "dolly", "-server", listen, "-target", filepath.Join(disks, fmt.Sprintf("pc%02d-%d", i+1, round)),
				"-name", fmt.Sprintf("pc%02d", i+1), "-listen-data", "127.0.0.1:0", "-no-probe", "-join-timeout", "30s"))
		}
		if code := queue.wait(t, 2*time.Minute); code != 0 || !strings.Contains(queue.out.String(), "2 of 2 nodes verified") {
			t.Fatalf("round %d: dolly-server cast exited %d:\n%s\nserver:\n%s", round+1, code, queue.out.String(), srv.out.String())
		}
		want, _ := testimage.SHA256(filepath.Join(disks, fmt.Sprint("raw", round)), -1)
		if round == 0 {
			want, _ = testimage.SHA256(filepath.Join(lib, image), -1)
		}
		for i, n := range nodes {
			if code := n.wait(t, time.Minute); code != 0 {
				t.Errorf("round %d: pc%02d exited %d:\n%s", round+1, i+1, code, n.out.String())
			}
			if got, _ := testimage.SHA256(filepath.Join(disks, fmt.Sprintf("pc%02d-%d", i+1, round)), size); got != want {
				t.Errorf("round %d: pc%02d holds %.12s, want %.12s", round+1, i+1, got, want)
			}
		}
	}
	select {
	case <-srv.done:
		t.Fatalf("the service exited:\n%s", srv.out.String())
	default:
	}
	for _, want := range []string{"cast 1 of first.img is over: verified", "cast 2 of second.img.zst is over: verified"} {
		if !strings.Contains(srv.out.String(), want) {
			t.Errorf("the service does not say %q:\n%s", want, srv.out.String())
		}
	}
}

// waitLine waits until p's output holds one of lines, or p exits.
func waitLine(t *testing.T, p *proc, lines ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, l := range lines {
			if strings.Contains(p.out.String(), l) {
				return
			}
		}
		select {
		case <-p.done:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never printed %q:\n%s", p.cmd.Path, lines, p.out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a process's output
	}
}
