package e2e

import (
	"crypto/ed25519"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testimage"
)

// TestForgingRelayIsCaught joins a keyed cast as pc01, a node that holds
// the key, and so is pc02's upstream in the chain. It sends pc02 another
// image than the source's, framed and tagged under the cast key, signed
// with a key of its own. pc02 must refuse the stream before it writes a
// byte: only the source's signature counts.
func TestForgingRelayIsCaught(t *testing.T) {
	keyFile := makeKey(t)
	file, err := castkey.ReadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key := file.Shared() // what the cast runs under, as any node with the file derives it
	img, _, targets := keyCast(t, 1)
	before, _ := testimage.SHA256(targets[0], -1)
	forged := filepath.Join(t.TempDir(), "forged.img")
	if err := testimage.Write(forged, 8<<20, 99, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	start(t, "dolly-server", "-image", img, "-chain", "-nodes", "2", "-listen", addr, "-key", keyFile, "-compress", "no",
		"-no-probe", "-net-probe", "0", "-yes", "-node-timeout", "30s")

	// The relay's data port, then its hello: pc01 comes first in the chain.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nonce := castkey.NewNonce()
	c := sayHello(t, addr, control.Hello{Version: stream.Version, Name: "pc01", DataAddr: ln.Addr().String(), Nonce: nonce})
	m, err := control.NodeHandshake(c, key, nonce, 10*time.Second)
	if err != nil || m.Type != control.MsgWelcome {
		t.Fatalf("the relay's join: %+v, %v", m, err)
	}
	cast := m.Welcome.Cast
	if err := c.Send(control.Message{Type: control.MsgReady, Ready: &control.Ready{Target: "/dev/evil", TargetSize: 1 << 30, Block: true}}); err != nil {
		t.Fatal(err)
	}
	victim := start(t, "dolly", "-server", addr, "-target", targets[0], "-name", "pc02", "-listen-data", "127.0.0.1:0", "-key", keyFile, "-no-probe", "-join-timeout", "30s")
	var child *control.Peer
	for child == nil {
		m, err := c.Recv(30 * time.Second)
		if err != nil {
			t.Fatalf("the relay waiting for its place: %v\n%s", err, victim.out.String())
		}
		if m.Type == control.MsgAssign && len(m.Assign.Children) == 1 {
			child = &m.Assign.Children[0]
		}
	}
	if child.Name != "pc02" {
		t.Fatalf("the relay was given %s to feed, not pc02", child.Name)
	}

	// The relay's own stream: another image under the cast key, signed
	// with a key that is not the source's.
	im, err := imaging.OpenImage(forged)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	enc, err := stream.NewEncoder(im, cast, stream.DefaultFrameSize, imaging.Raw)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	fk := stream.NewFrameKey(key, cast, m.Welcome.Encrypted)
	_, own, _ := ed25519.GenerateKey(nil)
	fk.Sign(own)
	enc.SetKey(fk)
	dc, err := net.Dial("tcp", child.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if _, err := stream.OpenStream(dc, enc.Header(), stream.NewFrameKey(key, cast, m.Welcome.Encrypted), nil); err != nil {
		t.Fatalf("the data handshake with pc02 (the relay holds the key): %v", err)
	}
	for {
		ch, err := enc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (&net.Buffers{ch.Header, ch.Payload, ch.Tag}).WriteTo(dc); err != nil {
			break // pc02 hung up: what it was sent did not verify
		}
	}

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(victim.out.String(), "signature") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling pc02's log: there is nothing to wait on
	}
	if !strings.Contains(victim.out.String(), "not the source's") {
		t.Errorf("pc02 does not say the frames were forged:\n%q", victim.out.String())
	}
	if after, _ := testimage.SHA256(targets[0], -1); after != before {
		t.Error("pc02 wrote what the relay forged")
	}
}
