package dolly

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"dolly/capacity"
)

// Control messages travel on one TCP connection per node, each as a 4-byte
// little-endian length followed by a JSON object with a "type" field.

// MaxMessage bounds one control message; longer ones are refused before
// anything is allocated for them.
const MaxMessage = 1 << 20

// MsgType names a control message.
type MsgType string

const (
	MsgHello    MsgType = "hello"    // node → server: who I am
	MsgWelcome  MsgType = "welcome"  // server → node: the cast and image
	MsgReject   MsgType = "reject"   // server → node: you cannot join
	MsgReady    MsgType = "ready"    // node → server: my target is checked
	MsgAssign   MsgType = "assign"   // server → node: your place in the plan
	MsgProgress MsgType = "progress" // node → server: bytes so far
	MsgDone     MsgType = "done"     // node → server: written and verified
	MsgFail     MsgType = "fail"     // node → server: I failed, and why
	MsgResult   MsgType = "result"   // server → node: the server's verdict
	MsgAbort    MsgType = "abort"    // server → node: the cast is off

	// While the cast runs, the server rewires around failed nodes.
	MsgAttach       MsgType = "attach"        // server → node: send the stream to this child too
	MsgDetach       MsgType = "detach"        // server → node: stop sending to this child
	MsgAttachFailed MsgType = "attach-failed" // node → server: could not serve that child
	MsgChildLost    MsgType = "child-lost"    // node → server: a child's connection failed
	MsgPing         MsgType = "ping"          // server → node: I am here
)

// Message is one control message; the field matching Type is set.
type Message struct {
	Type     MsgType   `json:"type"`
	Hello    *Hello    `json:"hello,omitempty"`
	Welcome  *Welcome  `json:"welcome,omitempty"`
	Ready    *Ready    `json:"ready,omitempty"`
	Assign   *Assign   `json:"assign,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	Done     *Done     `json:"done,omitempty"`
	Result   *Result   `json:"result,omitempty"`
	// Peer is the child of an attach, detach, attach-failed or child-lost.
	Peer *Peer `json:"peer,omitempty"`
	// Reason explains a reject, fail, abort, attach-failed or child-lost.
	Reason string `json:"reason,omitempty"`
}

// Hello introduces a node.
type Hello struct {
	Version  int      `json:"version"`
	Name     string   `json:"name"`
	MACs     []string `json:"macs,omitempty"`
	DataAddr string   `json:"data_addr"` // where upstream connects; an empty host means "the address I connect from"
	Target   string   `json:"target,omitempty"`
	// Resume is set by a node that is part of a cast already: it lost the
	// server and comes back, to a restarted server or the same one.
	Resume *Resume `json:"resume,omitempty"`
}

// Resume is what a node in a cast brings to the server it reconnects to.
type Resume struct {
	Cast        CastID `json:"cast"`
	Fingerprint string `json:"fingerprint"` // of the image, as the first server saw it
	Encoding    string `json:"encoding"`    // how the stream travels
	FrameSize   int    `json:"frame_size"`
	Pos         int64  `json:"pos"` // stream bytes received so far
	Target      string `json:"target"`
	// Done is set once the node has the whole image; Digest is then its
	// content digest, which the server has not confirmed yet.
	Done   bool   `json:"done"`
	Digest string `json:"digest,omitempty"`
}

// Welcome describes the cast to a node that may join.
type Welcome struct {
	Cast        CastID `json:"cast"`
	Image       string `json:"image"`
	ImageSize   int64  `json:"image_size"` // raw bytes each target must hold
	Target      string `json:"target"`     // the server's default target, if any
	Fingerprint string `json:"fingerprint"`
	// Resumed says the server takes the node's cast up where it was.
	Resumed bool `json:"resumed,omitempty"`
}

// Ready reports a checked target and, unless the node was told not to
// measure itself, its probe for the capacity model.
type Ready struct {
	Target     string          `json:"target"`
	TargetSize int64           `json:"target_size"`
	Block      bool            `json:"block"`
	Probe      *capacity.Probe `json:"probe,omitempty"`
}

// Peer is another node on the data path.
type Peer struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// Assign places a node in the plan.
type Assign struct {
	Upstream string `json:"upstream"` // name of the sender, for messages
	Children []Peer `json:"children"`
	// Encoding is how the stream travels ("raw", "zstd", "gzip"): the plan
	// may send an image otherwise than it is stored.
	Encoding string `json:"encoding"`
}

// Progress is a node's periodic report; it is also how the server knows
// the node is alive.
type Progress struct {
	Stream  int64 `json:"stream"`  // stream bytes received and verified
	Written int64 `json:"written"` // raw bytes on the target
	Pos     int64 `json:"pos"`     // stream bytes received (and passed on)
}

// Done is a node's final report.
type Done struct {
	Digest  string  `json:"digest"`
	Written int64   `json:"written"`
	Seconds float64 `json:"seconds"`
	// Lost names children the node could not keep sending to.
	Lost []string `json:"lost,omitempty"`
}

// Result is the server's verdict on a node.
type Result struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	// After is what a netbooted node does once the cast is over: "reboot",
	// "poweroff", "shell" or "" (just exit).
	After string `json:"after,omitempty"`
}

// validate checks that the body matching the type is present.
func (m *Message) validate() error {
	missing := false
	switch m.Type {
	case MsgHello:
		missing = m.Hello == nil
	case MsgWelcome:
		missing = m.Welcome == nil
	case MsgReady:
		missing = m.Ready == nil
	case MsgAssign:
		missing = m.Assign == nil
	case MsgProgress:
		missing = m.Progress == nil
	case MsgDone:
		missing = m.Done == nil
	case MsgResult:
		missing = m.Result == nil
	case MsgAttach, MsgDetach, MsgAttachFailed, MsgChildLost:
		missing = m.Peer == nil
	case MsgReject, MsgFail, MsgAbort, MsgPing:
	default:
		return fmt.Errorf("unknown control message type %q", m.Type)
	}
	if missing {
		return fmt.Errorf("control message %q without its body", m.Type)
	}
	return nil
}

// Conn is a control connection. Send is safe for concurrent use; Recv is
// used by one goroutine.
type Conn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
}

// NewConn wraps a connection.
func NewConn(c net.Conn) *Conn { return &Conn{c: c, r: bufio.NewReader(c)} }

// Send writes one message.
func (c *Conn) Send(m Message) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s message: %w", m.Type, err)
	}
	if len(body) > MaxMessage {
		return fmt.Errorf("%s message of %d bytes exceeds %d", m.Type, len(body), MaxMessage)
	}
	buf := make([]byte, 4+len(body))
	binary.LittleEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.c.Write(buf); err != nil {
		return fmt.Errorf("sending %s message: %w", m.Type, err)
	}
	return nil
}

// Recv reads one message, waiting at most timeout (0: no limit).
func (c *Conn) Recv(timeout time.Duration) (Message, error) {
	if timeout > 0 {
		c.c.SetReadDeadline(time.Now().Add(timeout))
		defer c.c.SetReadDeadline(time.Time{})
	}
	return ReadMessage(c.r)
}

// ReadMessage decodes one length-prefixed message from r.
func ReadMessage(r io.Reader) (Message, error) {
	var m Message
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return m, err
	}
	n := binary.LittleEndian.Uint32(lb[:])
	if n == 0 || n > MaxMessage {
		return m, fmt.Errorf("control message of %d bytes (limit %d)", n, MaxMessage)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return m, fmt.Errorf("reading control message: %w", err)
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, fmt.Errorf("malformed control message: %w", err)
	}
	if err := m.validate(); err != nil {
		return m, err
	}
	return m, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.c.RemoteAddr() }

// LocalAddr is our address.
func (c *Conn) LocalAddr() net.Addr { return c.c.LocalAddr() }
