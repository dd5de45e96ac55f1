package control

import (
	"errors"
	"net"
	"testing"
	"time"

	"dolly/dolly/castkey"
)

func TestControlMessagesAreTagged(t *testing.T) {
	k, err := castkey.ParseKey(string(castkey.NewKey()))
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	node, server := NewConn(a), NewConn(b)
	nn, sn := castkey.NewNonce(), castkey.NewNonce()
	node.Authenticate(k, nn, sn, false)
	server.Authenticate(k, nn, sn, true)

	go node.Send(Message{Type: MsgProgress, Progress: &Progress{Stream: 5}})
	m, err := server.Recv(time.Second)
	if err != nil || m.Progress.Stream != 5 {
		t.Fatalf("tagged message: %+v, %v", m, err)
	}

	// A message as an attacker would inject it: well formed, no valid tag.
	plain := NewConn(a)
	go plain.Send(Message{Type: MsgAbort, Reason: "forged"})
	if _, err := server.Recv(time.Second); !errors.Is(err, castkey.ErrAuth) {
		t.Fatalf("forged message: %v, want an authentication error", err)
	}
}
