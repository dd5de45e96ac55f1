package control

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"net"
	"testing"
	"time"

	"dolly/dolly/castkey"
)

// enroll runs both halves of an enrollment over a pipe, the node trusting
// trusted, and returns what each got.
func enroll(t *testing.T, key castkey.Key, trusted ed25519.PublicKey) (nodeMsg Message, nodeSecret []byte, nodeErr error, server *Conn, serverSecret []byte, serverErr error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	node, srv := NewConn(a), NewConn(b)
	nonce, eph := castkey.NewNonce(), NewEnrollKey()
	type result struct {
		secret []byte
		err    error
	}
	done := make(chan result, 1)
	go func() {
		m, err := srv.Recv(time.Second)
		if err != nil {
			done <- result{nil, err}
			return
		}
		secret, err := ServerEnroll(srv, key.Identity(), m.Hello, time.Second)
		if err == nil {
			err = srv.Send(Message{Type: MsgWelcome, Welcome: &Welcome{SealedKey: SealCastKey(secret, key)}})
		}
		done <- result{secret, err}
	}()
	hello := Hello{Version: 2, Name: "pc01", DataAddr: ":1", Nonce: nonce, Enroll: eph.PublicKey().Bytes()}
	if err := node.Send(Message{Type: MsgHello, Hello: &hello}); err != nil {
		t.Fatal(err)
	}
	nodeMsg, nodeSecret, nodeErr = NodeEnroll(node, trusted, nonce, eph, time.Second)
	if nodeErr != nil {
		a.Close()
	}
	r := <-done
	return nodeMsg, nodeSecret, nodeErr, srv, r.secret, r.err
}

func TestEnrollHandsTheCastKeyToANodeThatTrustsTheServer(t *testing.T) {
	key := castkey.NewKey()
	m, secret, err, _, serverSecret, serverErr := enroll(t, key, key.Identity().Public().(ed25519.PublicKey))
	if err != nil || serverErr != nil {
		t.Fatalf("node: %v; server: %v", err, serverErr)
	}
	if m.Type != MsgWelcome || !bytes.Equal(secret, serverSecret) {
		t.Fatalf("node got %s; secrets agree: %v", m.Type, bytes.Equal(secret, serverSecret))
	}
	got, err := OpenCastKey(secret, m.Welcome.SealedKey)
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("the cast key from the welcome: %q, %v", got, err)
	}
	if _, err := OpenCastKey(castkey.NewNonce(), m.Welcome.SealedKey); !errors.Is(err, castkey.ErrAuth) {
		t.Errorf("the sealed key opened under another secret: %v", err)
	}
}

func TestEnrollRefusesAServerThatSignsAsAnother(t *testing.T) {
	key := castkey.NewKey()
	other := castkey.NewKey().Identity().Public().(ed25519.PublicKey)
	_, _, err, _, _, serverErr := enroll(t, key, other)
	if !errors.Is(err, castkey.ErrAuth) {
		t.Fatalf("a node trusting another server key enrolled: %v", err)
	}
	if serverErr == nil {
		t.Error("the server went on with a node that refused it")
	}
}

func TestServerKeyText(t *testing.T) {
	pub := castkey.NewKey().Identity().Public().(ed25519.PublicKey)
	back, err := castkey.ParseServerKey(castkey.ServerKey(pub))
	if err != nil || !back.Equal(pub) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := castkey.ParseServerKey("not-a-key"); err == nil {
		t.Error("a malformed server key was taken")
	}
}
