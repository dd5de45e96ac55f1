package control

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"time"

	"dolly/dolly/castkey"
)

// Conn is a control connection. Send is safe for concurrent use; Recv is
// used by one goroutine. Once Authenticate has been called, every message
// carries a tag and a message without a valid one ends the connection.
type Conn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
	mac *controlMAC // set once, before concurrent use

	// transcript hashes every message body sent or received before the
	// connection is authenticated, in order: the handshake's proofs and
	// the session key cover it, so a hello altered on its way fails them.
	tmu        sync.Mutex
	transcript hash.Hash

	limit int // the longest message Recv takes; MaxMessage unless lowered
}

// NewConn wraps a connection.
func NewConn(c net.Conn) *Conn {
	return &Conn{c: c, r: bufio.NewReader(c), transcript: sha256.New(), limit: MaxMessage}
}

// Raw is the connection's bytes past the control messages, for a stream
// that follows them on the same connection (a capture): reads start with
// whatever the message reader has buffered.
func (c *Conn) Raw() (io.Reader, io.Writer) { return c.r, c.c }

// SetLimit bounds the messages Recv takes to n bytes (at most MaxMessage):
// a peer not yet admitted gets little room. Called by the goroutine that
// calls Recv.
func (c *Conn) SetLimit(n int) { c.limit = min(n, MaxMessage) }

// record adds an untagged message body to the transcript.
func (c *Conn) record(body []byte) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(body)))
	c.transcript.Write(n[:])
	c.transcript.Write(body)
}

// Transcript is the SHA-256 of the messages sent and received so far,
// untagged, each as its length (4 bytes, little-endian) and its JSON.
func (c *Conn) Transcript() []byte {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	return c.transcript.Sum(nil)
}

// Authenticate switches the connection to tagged messages under the
// session key of a finished handshake, which covers the transcript so
// far. server says which end this is.
func (c *Conn) Authenticate(k castkey.Key, nodeNonce, serverNonce []byte, server bool) {
	c.authenticate(k.Derive("control", nil), nodeNonce, serverNonce, server)
}

// authenticate switches to tagged messages under a session key made from
// base: the cast key's control key, or an enrollment's agreed secret.
func (c *Conn) authenticate(base, nodeNonce, serverNonce []byte, server bool) {
	m := &controlMAC{key: sessionKey(base, nodeNonce, serverNonce, c.Transcript()), sendLabel: 'n', recvLabel: 's'}
	if server {
		m.sendLabel, m.recvLabel = 's', 'n'
	}
	c.mac = m
}

// Authenticated reports whether messages are tagged.
func (c *Conn) Authenticated() bool { return c.mac != nil }

// Send writes one message.
func (c *Conn) Send(m Message) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s message: %w", m.Type, err)
	}
	n := len(body)
	if c.mac != nil {
		n += controlTagLen
	}
	if n > MaxMessage {
		return fmt.Errorf("%s message of %d bytes exceeds %d", m.Type, n, MaxMessage)
	}
	buf := make([]byte, 4, 4+n)
	binary.LittleEndian.PutUint32(buf, uint32(n))
	buf = append(buf, body...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.mac != nil {
		buf = append(buf, c.mac.tag(c.mac.sendLabel, c.mac.sent, body)...)
		c.mac.sent++
	} else {
		c.record(body)
	}
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
	body, err := readBody(c.r, c.limit)
	if err != nil {
		return Message{}, err
	}
	if c.mac != nil {
		if len(body) < controlTagLen {
			return Message{}, fmt.Errorf("control message without its tag: %w", castkey.ErrAuth)
		}
		body, tag := body[:len(body)-controlTagLen], body[len(body)-controlTagLen:]
		if !hmac.Equal(tag, c.mac.tag(c.mac.recvLabel, c.mac.recv, body)) {
			return Message{}, fmt.Errorf("control message with a wrong tag (altered, replayed or forged): %w", castkey.ErrAuth)
		}
		c.mac.recv++
		return decodeMessage(body)
	}
	c.record(body)
	return decodeMessage(body)
}

// ReadMessage decodes one length-prefixed, untagged message from r.
func ReadMessage(r io.Reader) (Message, error) {
	body, err := readBody(r, MaxMessage)
	if err != nil {
		return Message{}, err
	}
	return decodeMessage(body)
}

// readBody reads one length-prefixed message body, refusing a length over
// limit before allocating for it.
func readBody(r io.Reader, limit int) ([]byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(lb[:])
	if n == 0 || n > uint32(limit) {
		return nil, fmt.Errorf("control message of %d bytes (limit %d)", n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading control message: %w", err)
	}
	return body, nil
}

func decodeMessage(body []byte) (Message, error) {
	var m Message
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
