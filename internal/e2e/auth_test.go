package e2e

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/dolly/castkey"
	"dolly/internal/testimage"
)

// makeKey writes a fresh cast key with "dolly key".
func makeKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cast.key")
	out, err := exec.Command(filepath.Join(bin, "dolly"), "key", "-o", path).CombinedOutput()
	if err != nil {
		t.Fatalf("dolly key: %v\n%s", err, out)
	}
	return path
}

// keyCast is an image and old disks for the key tests.
func keyCast(t *testing.T, n int) (img, want string, targets []string) {
	t.Helper()
	dir := t.TempDir()
	img = filepath.Join(dir, "nt.img")
	const size = 8 << 20
	if err := testimage.Write(img, size, 31, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	want, _ = testimage.SHA256(img, -1)
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("disk%d", i))
		testimage.Fill(p, 0xFF, size+4096)
		targets = append(targets, p)
	}
	return img, want, targets
}

// TestKeyedServerRefusesStrangers: a node with the wrong key and one with
// none are refused (non-zero exit, authentication error, target untouched,
// the refusal shown by the server), and a node with the key casts after them.
func TestKeyedServerRefusesStrangers(t *testing.T) {
	key, other := makeKey(t), makeKey(t)
	img, want, targets := keyCast(t, 3)
	before, _ := testimage.SHA256(targets[1], -1)
	addr := freePort(t)
	srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-key", key, "-no-probe", "-yes")
	strangers := []struct {
		name string
		args []string
		want string
	}{
		{"wrongkey", []string{"-key", other}, "does not know this node's cast key"},
		{"nokey", nil, "run dolly with -key FILE"},
	}
	for i, s := range strangers {
		args := append([]string{"-server", addr, "-target", targets[i+1], "-name", s.name, "-listen-data", "127.0.0.1:0", "-join-timeout", "30s", "-no-probe"}, s.args...)
		p := start(t, "dolly", args...)
		if code := p.wait(t, time.Minute); code == 0 || !strings.Contains(p.out.String(), "authentication failed") || !strings.Contains(p.out.String(), s.want) {
			t.Errorf("%s: exit %d:\n%s", s.name, code, p.out.String())
		}
		if after, _ := testimage.SHA256(targets[i+1], -1); after != before {
			t.Errorf("%s: target changed", s.name)
		}
	}
	good := start(t, "dolly", "-server", addr, "-target", targets[0], "-name", "pc01", "-listen-data", "127.0.0.1:0", "-key", key, "-no-probe")
	if code := good.wait(t, time.Minute); code != 0 {
		t.Fatalf("keyed node exited %d:\n%s", code, good.out.String())
	}
	if code := srv.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", code, srv.out.String())
	}
	if got, _ := testimage.SHA256(targets[0], 8<<20); got != want {
		t.Error("the keyed node's target differs from the image")
	}
	out := srv.out.String()
	for _, w := range []string{"refused wrongkey", "refused nokey", "1 of 1 nodes verified"} {
		if !strings.Contains(out, w) {
			t.Errorf("server output lacks %q:\n%s", w, out)
		}
	}
}

// TestKeyedNodeRefusesAnUnkeyedServer: a node with a key does not join a
// server that cannot prove it, and writes nothing.
func TestKeyedNodeRefusesAnUnkeyedServer(t *testing.T) {
	key := makeKey(t)
	img, _, targets := keyCast(t, 1)
	before, _ := testimage.SHA256(targets[0], -1)
	addr := freePort(t)
	srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-no-probe", "-yes")
	n := start(t, "dolly", "-server", addr, "-target", targets[0], "-name", "pc01", "-listen-data", "127.0.0.1:0", "-key", key, "-no-probe", "-join-timeout", "30s")
	if code := n.wait(t, time.Minute); code == 0 || !strings.Contains(n.out.String(), "did not prove the cast key") {
		t.Errorf("node exit %d:\n%s", code, n.out.String())
	}
	if after, _ := testimage.SHA256(targets[0], -1); after != before {
		t.Error("target changed")
	}
	srv.cmd.Process.Kill()
	if !strings.Contains(srv.out.String(), "warning: no -key") {
		t.Errorf("an unkeyed server does not warn:\n%s", srv.out.String())
	}
}

// TestEncryptedCast casts along a chain with -key and -encrypt.
func TestEncryptedCast(t *testing.T) {
	key := makeKey(t)
	img, want, targets := keyCast(t, 3)
	addr := freePort(t)
	srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "3", "-listen", addr, "-key", key, "-encrypt", "-no-probe", "-yes")
	var nodes []*proc
	for i, tg := range targets {
		nodes = append(nodes, start(t, "dolly", "-server", addr, "-target", tg, "-name", fmt.Sprintf("pc%02d", i+1), "-listen-data", "127.0.0.1:0", "-key", key, "-no-probe", "-join-timeout", "30s"))
	}
	for i, n := range nodes {
		if code := n.wait(t, time.Minute); code != 0 {
			t.Errorf("pc%02d exited %d:\n%s", i+1, code, n.out.String())
		}
		if got, _ := testimage.SHA256(targets[i], 8<<20); got != want {
			t.Errorf("pc%02d: target differs from the image", i+1)
		}
	}
	if code := srv.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", code, srv.out.String())
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", st.Mode(), err)
	}
}

// TestEnrollment: nodes that hold no cast key, only the server's public
// key, enroll. The one -allow names gets the cast key and casts; one it
// does not name is refused and writes nothing; one given another server's
// key refuses this server. The cast key never crosses the network.
func TestEnrollment(t *testing.T) {
	keyFile, otherFile := makeKey(t), makeKey(t)
	key, err := castkey.ReadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	other, err := castkey.ReadKeyFile(otherFile)
	if err != nil {
		t.Fatal(err)
	}
	serverKey := castkey.ServerKey(key.Identity().Public().(ed25519.PublicKey))
	img, want, targets := keyCast(t, 3)
	before, _ := testimage.SHA256(targets[1], -1)
	addr := freePort(t)
	srv := start(t, "dolly-server", "-image", img, "-chain", "-nodes", "1", "-listen", addr, "-key", keyFile, "-allow", "pc0[1-1],52:54:00:aa:*", "-no-probe", "-yes")
	strangers := []struct {
		name, serverKey, want string
	}{
		{"pc02", serverKey, "not admitted"},
		{"pc03", castkey.ServerKey(other.Identity().Public().(ed25519.PublicKey)), "does not sign as the server key"},
	}
	for i, s := range strangers {
		n := start(t, "dolly", "-server", addr, "-target", targets[i+1], "-name", s.name, "-listen-data", "127.0.0.1:0", "-server-key", s.serverKey, "-no-probe", "-join-timeout", "30s")
		if code := n.wait(t, time.Minute); code == 0 || !strings.Contains(n.out.String(), s.want) {
			t.Errorf("%s: exit %d:\n%s", s.name, code, n.out.String())
		}
		if after, _ := testimage.SHA256(targets[i+1], -1); after != before {
			t.Errorf("%s: target changed", s.name)
		}
	}
	good := start(t, "dolly", "-server", addr, "-target", targets[0], "-name", "pc01", "-listen-data", "127.0.0.1:0", "-server-key", serverKey, "-no-probe", "-join-timeout", "30s")
	if code := good.wait(t, time.Minute); code != 0 {
		t.Fatalf("the admitted node exited %d:\n%s\nserver:\n%s", code, good.out.String(), srv.out.String())
	}
	if code := srv.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", code, srv.out.String())
	}
	if got, _ := testimage.SHA256(targets[0], 8<<20); got != want {
		t.Error("the enrolled node's target differs from the image")
	}
	out := srv.out.String()
	for _, w := range []string{"server key " + serverKey, "refused pc02", "not admitted", "1 of 1 nodes verified"} {
		if !strings.Contains(out, w) {
			t.Errorf("server output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out+good.out.String(), strings.TrimSpace(string(key))) {
		t.Error("the cast key shows in a program's output")
	}
}
