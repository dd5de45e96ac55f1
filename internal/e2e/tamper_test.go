package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/dial"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// helloProxy stands between nodes and the server at server, as an
// attacker on the path would: it rewrites each node's hello with rewrite
// and passes everything else on unchanged. It returns its address.
func helloProxy(t *testing.T, server string, rewrite func(*control.Hello)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			node, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer node.Close()
				// The server may not listen yet: try as a node would.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				srv, err := dial.Backoff(ctx, server, 20*time.Millisecond, 200*time.Millisecond, nil)
				if err != nil {
					return
				}
				defer srv.Close()
				m, err := control.ReadMessage(node)
				if err != nil || m.Hello == nil {
					return
				}
				rewrite(m.Hello)
				if control.NewConn(srv).Send(m) != nil {
					return
				}
				go io.Copy(srv, node)
				io.Copy(node, srv)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestAlteredHelloIsRefused rewrites a keyed node's hello on its way to
// the server: another name, or a resume that claims the node has the
// whole image with its digest (which, taken as it came, would have the
// server report the node verified while it wrote nothing). The handshake's
// proofs cover the hello, so the node refuses the server's proof, exits
// non-zero and writes nothing, and the server verifies no one.
func TestAlteredHelloIsRefused(t *testing.T) {
	key := makeKey(t)
	img, _, targets := keyCast(t, 1)
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	d := imaging.NewDigester()
	d.Write(raw)
	digest := d.Sum().String()
	im, err := imaging.OpenImage(img)
	if err != nil {
		t.Fatal(err)
	}
	fingerprint, err := im.Fingerprint()
	im.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		rewrite func(*control.Hello)
	}{
		{"another name", func(h *control.Hello) { h.Name = "intruder" }},
		{"a fake done", func(h *control.Hello) {
			h.Resume = &control.Resume{Fingerprint: fingerprint, Encoding: "raw", FrameSize: stream.DefaultFrameSize,
				Pos: int64(len(raw)), Target: h.Target, Done: true, Digest: digest}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := testimage.SHA256(targets[0], -1)
			addr := freePort(t)
			srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-key", key, "-no-probe", "-yes", "-join-timeout", "5s")
			proxy := helloProxy(t, addr, tc.rewrite)
			n := start(t, "dolly", "-server", proxy, "-target", targets[0], "-name", "pc01", "-listen-data", "127.0.0.1:0", "-key", key, "-no-probe", "-join-timeout", "10s")
			if code := n.wait(t, time.Minute); code == 0 || !strings.Contains(n.out.String(), "altered on its way") {
				t.Errorf("node: exit %d:\n%s", code, n.out.String())
			}
			if after, _ := testimage.SHA256(targets[0], -1); after != before {
				t.Error("the target changed")
			}
			code := srv.wait(t, time.Minute)
			out := srv.out.String()
			if code == 0 || strings.Contains(out, "1 of 1 nodes verified") || !strings.Contains(out, "refused") {
				t.Errorf("dolly-server exited %d:\n%s", code, out)
			}
		})
	}
}

// TestServerCannotNameAFile has the server name files as the target of a
// node that names none: one that does not exist (where a cron job could
// be planted) and one that does. The node must refuse both, exit
// non-zero, create nothing and change nothing.
func TestServerCannotNameAFile(t *testing.T) {
	img, _, targets := keyCast(t, 1)
	existing := targets[0]
	before, _ := testimage.SHA256(existing, -1)
	missing := filepath.Join(t.TempDir(), "cron.d", "dolly")
	if err := os.MkdirAll(filepath.Dir(missing), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{missing, existing} {
		addr := freePort(t)
		srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-target", target, "-no-probe", "-yes", "-join-timeout", "5s")
		n := start(t, "dolly", "-server", addr, "-name", "pc01", "-listen-data", "127.0.0.1:0", "-no-probe", "-join-timeout", "10s")
		if code := n.wait(t, time.Minute); code == 0 || !strings.Contains(n.out.String(), "not a block device") && !strings.Contains(n.out.String(), "no such file") {
			t.Errorf("%s: node exit %d:\n%s", target, code, n.out.String())
		}
		if code := srv.wait(t, time.Minute); code == 0 {
			t.Errorf("%s: dolly-server exited 0:\n%s", target, srv.out.String())
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("%s exists after the cast (%v)", missing, err)
	}
	if after, _ := testimage.SHA256(existing, -1); after != before {
		t.Errorf("%s changed", existing)
	}
}

// TestEscapesFromStrangersReachTheConsoleEscaped: a peer without the key
// says hello to a keyed server and answers its challenge with a fail whose
// reason holds terminal escape sequences (clear the screen, set the
// window title). The server shows the refusal with the sequences escaped:
// no ESC byte of theirs reaches the admin's console.
func TestEscapesFromStrangersReachTheConsoleEscaped(t *testing.T) {
	key := makeKey(t)
	img, _, _ := keyCast(t, 0)
	addr := freePort(t)
	srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-key", key, "-no-probe", "-yes", "-join-timeout", "3s")
	c := sayHello(t, addr, control.Hello{Version: stream.Version, Name: "pc01", DataAddr: "127.0.0.1:1", Nonce: []byte("0123456789abcdef")})
	if m, err := c.Recv(5 * time.Second); err != nil || m.Type != control.MsgChallenge {
		t.Fatalf("after hello: %+v, %v", m, err)
	}
	const evil = "\x1b[2J\x1b]0;owned\a\x1b[31mtrust me"
	if err := c.Send(control.Message{Type: control.MsgFail, Reason: evil}); err != nil {
		t.Fatal(err)
	}
	srv.wait(t, time.Minute)
	out := srv.out.String()
	if strings.ContainsRune(out, 0x1b) || strings.ContainsRune(out, '\a') {
		t.Errorf("a stranger's escape sequences reached the console:\n%q", out)
	}
	if !strings.Contains(out, `\x1b[2J\x1b]0;owned\a\x1b[31mtrust me`) {
		t.Errorf("the refusal does not show what the stranger sent, escaped:\n%s", out)
	}
}

// TestIdleStrangersDoNotStopJoining holds 80 idle connections open to a
// server allowed 64 descriptors: its accepts fail with EMFILE until idle
// strangers are dropped (each has a few seconds to say hello). A real
// node must still join and cast within 10 s.
func TestIdleStrangersDoNotStopJoining(t *testing.T) {
	testenv.RequireProgram(t, "prlimit", "util-linux")
	prlimit, _ := exec.LookPath("prlimit")
	img, want, targets := keyCast(t, 1)
	addr := freePort(t)
	srv := start(t, prlimit, "--nofile=64:64", "--", filepath.Join(bin, "dolly-server"),
		"-image", img, "-chain", "-nodes", "1", "-listen", addr, "-no-probe", "-yes", "-join-timeout", "30s")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	first, err := dial.Backoff(ctx, addr, 20*time.Millisecond, 200*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	idle := []net.Conn{first}
	for len(idle) < 80 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("idle connection %d: %v", len(idle)+1, err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	began := time.Now()
	n := start(t, "dolly", "-server", addr, "-target", targets[0], "-name", "pc01", "-listen-data", "127.0.0.1:0", "-no-probe", "-join-timeout", "10s")
	if code := n.wait(t, time.Minute); code != 0 {
		t.Fatalf("node exited %d after %s:\n%s\nserver:\n%s", code, time.Since(began), n.out.String(), srv.out.String())
	}
	took := time.Since(began)
	if took > 10*time.Second {
		t.Errorf("the node took %s to join and cast", took)
	}
	t.Logf("with 80 idle connections and 64 descriptors, the node joined and cast in %s", took.Round(time.Millisecond))
	if got, _ := testimage.SHA256(targets[0], 8<<20); got != want {
		t.Error("the target differs from the image")
	}
	if code := srv.wait(t, time.Minute); code != 0 {
		t.Errorf("dolly-server exited %d:\n%s", code, srv.out.String())
	}
}

// TestStrangerCannotFeedANode: in a cast without a key, a stranger who
// knows the cast (it joined as a node itself and got its ID) opens a data
// connection to a real node with a correct stream header. The node must
// drop it at the handshake: only a peer the server sends to that node
// knows its data token.
func TestStrangerCannotFeedANode(t *testing.T) {
	img, _, targets := keyCast(t, 1)
	before, _ := testimage.SHA256(targets[0], -1)
	addr, data := freePort(t), freePort(t)
	start(t, "dolly-server", "-image", img, "-chain", "-nodes", "3", "-listen", addr, "-no-probe", "-yes", "-join-timeout", "30s")
	node := start(t, "dolly", "-server", addr, "-target", targets[0], "-name", "pc01", "-listen-data", data, "-no-probe", "-join-timeout", "30s")

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := sayHello(t, addr, control.Hello{Version: stream.Version, Name: "stranger", DataAddr: "127.0.0.1:1"})
	m, err := c.Recv(10 * time.Second)
	if err != nil || m.Type != control.MsgWelcome {
		t.Fatalf("the stranger's hello: %+v, %v", m, err)
	}
	h := stream.StreamHeader{Version: stream.Version, Encoding: imaging.Raw, FrameSize: stream.DefaultFrameSize,
		Cast: m.Welcome.Cast, ImageSize: m.Welcome.ImageSize, StreamSize: m.Welcome.ImageSize}
	// pc01 listens once it has joined; the stranger tries until then.
	up, err := dial.Backoff(ctx, data, 20*time.Millisecond, 200*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(10 * time.Second))
	pos, err := stream.OpenStream(up, h, nil, nil)
	if err == nil {
		t.Fatalf("pc01 took the stranger as its upstream (from byte %d)", pos)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("pc01 neither took nor dropped the stranger's stream: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(node.out.String(), "dropped data connection") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the node's log: there is nothing to wait on
	}
	if !strings.Contains(node.out.String(), "does not prove") {
		t.Errorf("pc01 does not say why it dropped the stranger:\n%s", node.out.String())
	}
	if after, _ := testimage.SHA256(targets[0], -1); after != before {
		t.Error("pc01's target changed")
	}
}

// sayHello connects to the server at addr as a stranger would, once it
// listens, and sends hello; the connection closes when the test ends.
func sayHello(t *testing.T, addr string, hello control.Hello) *control.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	nc, err := dial.Backoff(ctx, addr, 20*time.Millisecond, 200*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := control.NewConn(nc)
	if err := c.Send(control.Message{Type: control.MsgHello, Hello: &hello}); err != nil {
		t.Fatal(err)
	}
	return c
}
