package control

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
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

func TestPrintableEscapesWhatCouldDriveATerminal(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"target /dev/sda2 is mounted", "target /dev/sda2 is mounted"},
		{"red \x1b[31mALERT\x1b[0m", `red \x1b[31mALERT\x1b[0m`},
		{"line\r\nfake line", `line\r\nfake line`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"naïve ünïcode 日本", "naïve ünïcode 日本"},
		{"bell\a and del\x7f", `bell\a and del\x7f`},
	} {
		if got := Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestReceivedTextIsEscaped(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go NewConn(a).Send(Message{Type: MsgFail, Reason: "\x1b]0;owned\a\x1b[2J"})
	m, err := NewConn(b).Recv(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := `\x1b]0;owned\a\x1b[2J`; m.Reason != want {
		t.Errorf("reason %q, want %q", m.Reason, want)
	}
}

func TestEveryTextOfAPeerIsEscaped(t *testing.T) {
	evil := "x\x1b[2Jy"
	for _, m := range []Message{
		{Type: MsgHello, Hello: &Hello{Name: evil, MACs: []string{evil}, DataAddr: evil, Target: evil, Resume: &Resume{Target: evil, Encoder: evil}}},
		{Type: MsgDone, Done: &Done{Digest: evil, Lost: []string{evil}}},
		{Type: MsgNetResult, NetResult: &NetResult{ID: 1, Error: evil}},
		{Type: MsgAssign, Assign: &Assign{Upstream: evil, Children: []Peer{{Name: evil, Addr: evil}}}},
		{Type: MsgWelcome, Welcome: &Welcome{Image: evil, Target: evil}},
	} {
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadMessage(bytes.NewReader(append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)))
		if err != nil {
			t.Fatal(err)
		}
		back, _ := json.Marshal(got)
		if bytes.Contains(back, []byte(`\u001b`)) {
			t.Errorf("%s: an escape sequence survived decoding: %s", m.Type, back)
		}
	}
}
