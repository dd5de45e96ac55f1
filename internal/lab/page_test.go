package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"dolly/internal/browser"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// The status page in a real browser during a cast in the lab (hosts in
// network namespaces, links shaped to 100 Mbit/s): every node shows, its
// progress moves, a node killed mid-cast turns FAILED and the others
// VERIFIED. The page is reached through a proxy into the server's
// namespace, as an admin's browser reaches the server across a network.
func TestStatusPageDuringALabCast(t *testing.T) {
	requireLab(t)
	ctx := browser.Headless(t, 3*time.Minute)
	bin := buildBinaries(t)
	labCtx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const nodes, mbit, victim = 4, 100.0, 1 // victim: pc02
	const size = 96 << 20                   // about 8 s at 100 Mbit/s
	dir := t.TempDir()
	img, want := writeImage(t, dir, size, 31, testimage.Dense)
	l := newShapedLab(labCtx, t, dir, nodes, mbit)
	c := startLabCast(labCtx, t, l, bin, t.TempDir(), img, size,
		[]string{"-http", ":9701", "-node-timeout", "2s", "-no-probe"}, []string{"-no-probe"})
	page := proxyInto(t, l.Server, net.JoinHostPort(l.Server.IP.String(), "9701"))

	row := func(node string) string { return fmt.Sprintf(`tr[data-node=%q]`, node) }
	steps := []chromedp.Action[chromedp.Void]{chromedp.Navigate("http://" + page + "/")}
	for _, h := range l.Nodes {
		steps = append(steps, chromedp.WaitVisible(chromedp.CSS(row(h.Name))), chromedp.WaitVisible(chromedp.CSS(`#picture g[data-node="`+h.Name+`"]`)))
	}
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("the page never showed the lab's %d nodes: %v\n%s", nodes, err, c.log("server"))
	}
	bytesOf := fmt.Sprintf(`Number(document.querySelector('%s td.written').dataset.bytes)`, row("pc04"))
	first, err := chromedp.Run(ctx, chromedp.Evaluate[int64](bytesOf))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf("%s > %d", bytesOf, first))); err != nil {
		t.Fatalf("pc04's progress stayed at %d on the page: %v", first, err)
	}
	pid := c.nodes[victim].Process.Pid
	for deadline := time.Now().Add(time.Minute); testenv.Written(pid) < size/4; {
		if time.Now().After(deadline) {
			t.Fatalf("pc02 has not written a quarter of the image within a minute:\n%s", c.log("pc02"))
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is nothing to wait on
	}
	syscall.Kill(pid, syscall.SIGKILL)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('%s .state').textContent === "FAILED"`, row("pc02")))); err != nil {
		t.Fatalf("the killed pc02 never turned FAILED on the page: %v\n%s", err, c.log("server"))
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('%s .state').textContent === "VERIFIED"`, row("pc04")))); err != nil {
		t.Fatalf("pc04 never turned VERIFIED on the page: %v\n%s", err, c.log("server"))
	}
	if dir := os.Getenv("DOLLY_SCREENSHOTS"); dir != "" {
		if shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(filepath.Join(dir, "status-page.png"), shot, 0o644)
		}
	}
	c.server.Wait()
	for i, n := range c.nodes {
		n.Wait()
		if i == victim {
			continue
		}
		if got, _ := testimage.SHA256(c.disks[i], size); got != want {
			t.Errorf("pc%02d holds %.12s, the image is %.12s", i+1, got, want)
		}
	}
}

// proxyInto listens on loopback here and forwards each connection to addr
// as seen from h's namespace; it returns the address to connect to.
func proxyInto(t *testing.T, h *Host, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			var out net.Conn
			err = InNamespace(h, func() (err error) {
				out, err = net.DialTimeout("tcp", addr, 5*time.Second)
				return err
			})
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return ln.Addr().String()
}
