package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// A truncated zstd image is refused by the server before any node writes a
// byte: both exit non-zero and the node's old data is untouched.
func TestTruncatedImageIsRefused(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	if err := testimage.Write(img, 8<<20, 11, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	zst := img + ".zst"
	if err := testimage.Compress(img, zst, imaging.Zstd); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(zst)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(zst, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "disk")
	testimage.Fill(target, 0xFF, 8<<20+4096)
	before, _ := testimage.SHA256(target, -1)

	addr := freePort(t)
	// The node goes first, so it is there whenever the server gets to it;
	// it gives up a few seconds after the server has gone.
	node := start(t, "dolly", "-server", addr, "-target", target, "-name", "pc01", "-listen-data", "127.0.0.1:0",
		"-join-timeout", "5s", "-no-probe")
	server := start(t, "dolly-server", "-image", zst, "-chain", "-nodes", "1", "-listen", addr, "-no-probe")
	code := server.wait(t, time.Minute)
	out := server.out.String()
	if code != 3 || !strings.Contains(out, "truncated or corrupt") {
		t.Fatalf("dolly-server exited %d; want 3 (could not start) and \"truncated or corrupt\":\n%s", code, out)
	}
	if code := node.wait(t, time.Minute); code == 0 {
		t.Fatalf("dolly exited 0 for a truncated image:\n%s", node.out.String())
	}
	if after, _ := testimage.SHA256(target, -1); after != before {
		t.Fatal("the target was changed although the image was refused")
	}
}

// badConn sends payload on a new control connection, half-closes it and
// waits until the server has closed its end: by then the server has done
// with the connection.
func badConn(t *testing.T, addr string, payload []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the server no longer accepts connections: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	// The server may hang up before reading everything; that is its right.
	c.Write(payload)
	c.(*net.TCPConn).CloseWrite()
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept a connection open after %d bad bytes (%.40q)", len(payload), payload)
	}
}

// dialWhenUp waits for the server to listen on addr.
func dialWhenUp(t *testing.T, p *proc, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("dolly-server exited before listening:\n%s", p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dolly-server does not listen on %s: %v\n%s", addr, err, p.out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a port: there is nothing to wait on
	}
}

func message(body []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func jsonMessage(t *testing.T, m control.Message) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return message(b)
}

// Garbage and malformed messages on the control port do not hurt the
// server: it drops those connections, and a real node cast afterwards is
// byte-identical.
func TestServerSurvivesBadControlInput(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	const size = 4 << 20
	if err := testimage.Write(img, size, 12, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	want, _ := testimage.SHA256(img, -1)
	target := filepath.Join(dir, "disk")
	testimage.Fill(target, 0xFF, size+4096)

	addr := freePort(t)
	server := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-no-probe", "-progress-interval", "1s")
	dialWhenUp(t, server, addr)

	// 1 MiB of random bytes over eight connections.
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		junk := make([]byte, 128<<10)
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		badConn(t, addr, junk)
	}
	name := strings.Repeat("n", 1000)
	huge := strings.Repeat("n", control.MaxMessage-200)
	tests := []struct {
		name    string
		payload []byte
	}{
		{"length 0xFFFFFFFF", append([]byte{0xff, 0xff, 0xff, 0xff}, `{"type":"hello"}`...)},
		{"length 0", []byte{0, 0, 0, 0}},
		{"invalid JSON", message([]byte(`{"type":"hello","hello":{"name":`))},
		{"random body", message(bytes.Repeat([]byte{0x9c, 0x00, 0xff}, 1000))},
		{"unknown type", message([]byte(`{"type":"gimme-the-image"}`))},
		{"hello without its body", message([]byte(`{"type":"hello"}`))},
		{"not a hello first", jsonMessage(t, control.Message{Type: control.MsgDone, Done: &control.Done{Digest: "00"}})},
		{"hello of another version", jsonMessage(t, control.Message{Type: control.MsgHello, Hello: &control.Hello{Version: 999, Name: "x", DataAddr: ":1"}})},
		{"hello with a long name", jsonMessage(t, control.Message{Type: control.MsgHello, Hello: &control.Hello{Version: stream.Version, Name: name, DataAddr: "127.0.0.1:9"}})},
		{"hello over the limit before admission", jsonMessage(t, control.Message{Type: control.MsgHello, Hello: &control.Hello{Version: stream.Version, Name: huge, DataAddr: "127.0.0.1:9"}})},
		{"hello over the size limit", jsonMessage(t, control.Message{Type: control.MsgHello, Hello: &control.Hello{Version: stream.Version, Name: huge + huge, DataAddr: ":9"}})},
		{"half a message", message([]byte(`{"type":"hello","hello":{"version":1,"name":"pc99","data_addr":":7"}}`))[:30]},
		{"half a length", []byte{0x10, 0x00}},
	}
	for _, tt := range tests {
		badConn(t, addr, tt.payload)
		select {
		case <-server.done:
			t.Fatalf("dolly-server exited after %s:\n%s", tt.name, server.out.String())
		default:
		}
	}

	node := start(t, "dolly", "-server", addr, "-target", target, "-name", "pc01", "-listen-data", "127.0.0.1:0", "-join-timeout", "30s", "-no-probe")
	if code := node.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly exited %d:\n%s\nserver:\n%s", code, node.out.String(), server.out.String())
	}
	// The server prints its summary after the node has gone: its output
	// is whole once it has exited.
	code := server.wait(t, time.Minute)
	out := server.out.String()
	if code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", code, out)
	}
	if got, _ := testimage.SHA256(target, size); got != want {
		t.Fatal("the target differs from the image")
	}
	if !strings.Contains(out, "1 of 1 nodes verified") {
		t.Errorf("server output lacks \"1 of 1 nodes verified\":\n%.4000s", out)
	}
	// The long name was refused, not shown: it would flood the admin's
	// view; the huge one was not even read.
	if strings.Contains(out, name) || !strings.Contains(out, "node name") {
		t.Errorf("the long node name was not refused:\n%.4000s", out)
	}
	if !strings.Contains(out, "(limit 16384)") {
		t.Errorf("the huge hello was not refused before it was read:\n%.4000s", out)
	}
}

// Images dolly cannot cast are refused with a message that names the file
// and what to do, and exit code 3: the cast could not start.
func TestUnusableImages(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		image string
		want  string
	}{
		{write("nt.img.xz", append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, make([]byte, 4096)...)), "xz-compressed, which dolly does not read: decompress it, or recompress it with zstd"},
		{write("nt.img.bz2", append([]byte("BZh9"), make([]byte, 4096)...)), "bzip2-compressed"},
		{write("empty.img", nil), "is empty"},
		{write("garbage.zst", append([]byte{0x28, 0xb5, 0x2f, 0xfd}, bytes.Repeat([]byte{0xa5}, 4096)...)), "garbage.zst"},
		{write("garbage.gz", append([]byte{0x1f, 0x8b, 0x08}, bytes.Repeat([]byte{0x5a}, 4096)...)), "garbage.gz"},
		{dir, "is a directory"},
		{filepath.Join(dir, "missing.img"), "does not exist"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.image), func(t *testing.T) {
			p := start(t, "dolly-server", "-image", tt.image, "-chain", "-nodes", "1", "-listen", freePort(t), "-no-probe")
			code := p.wait(t, 30*time.Second)
			out := p.out.String()
			if code != 3 || !strings.Contains(out, tt.want) || !strings.Contains(out, tt.image) {
				t.Fatalf("exit %d; want 3 and a message naming %s with %q:\n%s", code, tt.image, tt.want, out)
			}
		})
	}
}

// Bad command lines exit 2 with the problem and where to read about usage.
func TestBadFlags(t *testing.T) {
	tests := []struct {
		bin  string
		args []string
		want string
	}{
		{"dolly-server", []string{"-image", "x", "-tree", "0", "-nodes", "1"}, "-tree needs a fan-out of at least 1"},
		{"dolly-server", []string{"-image", "x", "-tree", "-2", "-nodes", "1"}, "-tree needs a fan-out of at least 1"},
		{"dolly-server", []string{"-image", "x", "-chain", "-nodes", "-1"}, "-nodes must be positive"},
		{"dolly-server", []string{"-image", "x", "-chain", "-nodes", "many"}, "-nodes"},
		{"dolly-server", []string{"-image", "x", "-chain", "-nodes", "1", "stray"}, "unexpected argument"},
		{"dolly", []string{"-target", "/dev/null"}, "-server is required"},
		{"dolly", []string{"-server", "127.0.0.1:1", "-frobnicate"}, "unknown"},
		{"dolly", []string{"-server", "127.0.0.1:1", "-join-timeout", "soon"}, "-join-timeout"},
	}
	for _, tt := range tests {
		p := start(t, tt.bin, tt.args...)
		code := p.wait(t, 10*time.Second)
		out := p.out.String()
		hint := fmt.Sprintf("Run %s --help for usage.", tt.bin)
		if code != 2 || !strings.Contains(out, tt.want) || !strings.Contains(out, hint) {
			t.Errorf("%s %q: exit %d, output %q; want 2, %q and %q", tt.bin, tt.args, code, out, tt.want, hint)
		}
	}
}

// TestNodeRefusesAMountedTarget: a node will not write over a mounted file
// system unless told -force; refused, the device is left as it was.
func TestNodeRefusesAMountedTarget(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "mkfs.ext4", "e2fsprogs")
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	const size = 8 << 20
	if err := testimage.Write(img, size, 41, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	want, _ := testimage.SHA256(img, -1)
	backing := filepath.Join(dir, "disk")
	if err := testimage.Fill(backing, 0, 16<<20); err != nil {
		t.Fatal(err)
	}
	dev := testenv.LoopDevice(t, backing)
	// Without lazy init and mounted read-only, the file system itself
	// writes nothing to the device, so any change would be the node's.
	testenv.Run(t, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "ro", dev, mnt).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount %s here: %v: %s", dev, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	before, _ := testimage.SHA256(dev, size)

	cast := func(force bool) (*proc, *proc) {
		addr := freePort(t)
		srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-no-probe", "-yes")
		args := []string{"-server", addr, "-target", dev, "-name", "pc01", "-listen-data", "127.0.0.1:0", "-no-probe", "-join-timeout", "30s"}
		if force {
			args = append(args, "-force")
		}
		return srv, start(t, "dolly", args...)
	}
	srv, node := cast(false)
	if code := node.wait(t, time.Minute); code == 0 || !strings.Contains(node.out.String(), "mounted on "+mnt) || !strings.Contains(node.out.String(), "-force") {
		t.Fatalf("node on a mounted target exited %d:\n%s", code, node.out.String())
	}
	srv.wait(t, time.Minute)
	if after, _ := testimage.SHA256(dev, size); after != before {
		t.Fatal("the mounted target changed")
	}

	srv, node = cast(true)
	if code := node.wait(t, time.Minute); code != 0 {
		t.Fatalf("node with -force exited %d:\n%s\nserver:\n%s", code, node.out.String(), srv.out.String())
	}
	srv.wait(t, time.Minute)
	if got, _ := testimage.SHA256(dev, size); got != want {
		t.Fatal("with -force the target does not hold the image")
	}
}
