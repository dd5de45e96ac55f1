package control

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"dolly/dolly/stream"
)

// The seed corpus under testdata/fuzz is checked in; this flag rewrites
// it: go test -run TestWriteFuzzSeeds -write-fuzz-seeds ./dolly/control
var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite the generated seed corpus in testdata/fuzz")

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzReadMessage feeds arbitrary bytes to the control-message decoder. It
// must never panic, must refuse an oversized length after reading only the
// prefix, and what it accepts must encode and decode to the same message.
func FuzzReadMessage(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &countReader{r: bytes.NewReader(data)}
		m, err := ReadMessage(r)
		if len(data) >= 4 {
			if n := binary.LittleEndian.Uint32(data); n == 0 || n > MaxMessage {
				if err == nil || r.n != 4 {
					t.Fatalf("length %d: read %d bytes, err %v; want an error after the 4-byte prefix", n, r.n, err)
				}
			}
		}
		if r.n > 4+MaxMessage {
			t.Fatalf("read %d bytes for one message, limit %d", r.n, 4+MaxMessage)
		}
		if err != nil {
			return
		}
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("an accepted message does not encode: %v", err)
		}
		m2, err := ReadMessage(bytes.NewReader(lengthPrefixed(body)))
		if err != nil {
			t.Fatalf("an accepted message, encoded again, is refused: %v\n%s", err, body)
		}
		if body2, _ := json.Marshal(m2); !bytes.Equal(body, body2) {
			t.Fatalf("round trip changed the message:\n%s\n%s", body, body2)
		}
	})
}

func lengthPrefixed(body []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// TestWriteFuzzSeeds writes the generated seed corpus: well-formed control
// messages and a few broken ones.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeFuzzSeeds {
		t.Skip("rewrites testdata/fuzz; run with -write-fuzz-seeds")
	}
	msgs := map[string]Message{
		"hello":            {Type: MsgHello, Hello: &Hello{Version: stream.Version, Name: "pc01", MACs: []string{"52:54:00:12:34:56"}, DataAddr: ":7071", Target: "/dev/sda"}},
		"welcome":          {Type: MsgWelcome, Welcome: &Welcome{Cast: stream.CastID{1, 2}, Image: "nt.img", ImageSize: 1 << 30, Fingerprint: "ab12"}},
		"assign":           {Type: MsgAssign, Assign: &Assign{Upstream: "pc01", Children: []Peer{{Name: "pc03", Addr: "198.18.0.3:7071"}}, Encoding: "zstd"}},
		"progress":         {Type: MsgProgress, Progress: &Progress{Stream: 1 << 20, Written: 2 << 20, Pos: 1 << 20}},
		"done":             {Type: MsgDone, Done: &Done{Digest: "00ff", Written: 1 << 30, Seconds: 12.5, Lost: []string{"pc04"}}},
		"abort":            {Type: MsgAbort, Reason: "cancelled by the operator"},
		"enroll":           {Type: MsgHello, Hello: &Hello{Version: stream.Version, Name: "pc02", DataAddr: ":7071", Nonce: bytes.Repeat([]byte{7}, 16), Enroll: bytes.Repeat([]byte{9}, 32)}},
		"challenge-enroll": {Type: MsgChallenge, Auth: &Auth{Nonce: bytes.Repeat([]byte{1}, 16), Ephemeral: bytes.Repeat([]byte{2}, 32), Signature: bytes.Repeat([]byte{3}, 64)}},
		"welcome-keyed": {Type: MsgWelcome, Welcome: &Welcome{Cast: stream.CastID{3}, Image: "nt.img", ImageSize: 1 << 20, Fingerprint: "cd34",
			SignKey: bytes.Repeat([]byte{4}, 32), SealedKey: bytes.Repeat([]byte{5}, 80), DataToken: bytes.Repeat([]byte{6}, 16)}},
		"fail-escapes": {Type: MsgFail, Reason: "\x1b[2J\x1b]0;title\a"},
	}
	for name, m := range msgs {
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		writeSeed(t, name, lengthPrefixed(body))
	}
	writeSeed(t, "huge-length", []byte{0xff, 0xff, 0xff, 0xff, '{'})
	writeSeed(t, "unknown-type", lengthPrefixed([]byte(`{"type":"bogus"}`)))
	writeSeed(t, "half", lengthPrefixed([]byte(`{"type":"hello","hello":{"name":"pc01"}}`))[:20])
}

// writeSeed writes one corpus file of FuzzReadMessage in the "go test fuzz
// v1" format.
func writeSeed(t *testing.T, name string, data []byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", "FuzzReadMessage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seed := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(seed), 0o644); err != nil {
		t.Fatal(err)
	}
}
