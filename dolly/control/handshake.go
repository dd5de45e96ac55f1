package control

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"dolly/dolly/castkey"
)

// The key handshake of a keyed cast. The node's nonce comes in its hello;
// the server answers with its nonce and its proof; the node checks that
// and answers with its own proof. Both proofs cover the hello whole (its
// hash, Conn.Transcript), so a hello rewritten on its way (another name,
// a resume or a digest it never sent) fails them. From then on every
// message carries a tag under a key of that connection alone
// (Conn.Authenticate). Both halves are here, side by side: NodeHandshake
// and ServerHandshake.

// NodeHandshake runs the node's half after it sent a hello carrying nonce
// (nil: the node has no key). It returns the server's first message after
// the handshake: a welcome, a reject or an abort. The server's proof is
// checked before anything else happens, so a node never acts on a server
// that does not know its key.
func NodeHandshake(c *Conn, key castkey.Key, nonce []byte, timeout time.Duration) (Message, error) {
	hello := c.Transcript() // the hello as this node sent it
	m, err := c.Recv(timeout)
	if err != nil {
		return m, err
	}
	switch {
	case m.Type == MsgChallenge && key == nil:
		return m, fmt.Errorf("%w: the server requires a cast key: run dolly with -key FILE", castkey.ErrAuth)
	case m.Type == MsgChallenge:
		if !hmac.Equal(m.Auth.Proof, ServerProof(key, nonce, m.Auth.Nonce, hello)) {
			c.Send(Message{Type: MsgFail, Reason: "authentication failed: the server's proof does not match this node's cast key"})
			return m, fmt.Errorf("%w: the server's proof does not match: it does not know this node's cast key (different -key files?), or this node's hello was altered on its way", castkey.ErrAuth)
		}
		proof := NodeProof(key, nonce, m.Auth.Nonce, hello)
		if err := c.Send(Message{Type: MsgProof, Auth: &Auth{Proof: proof}}); err != nil {
			return m, err
		}
		c.Authenticate(key, nonce, m.Auth.Nonce, false)
		return c.Recv(timeout)
	case key != nil && m.Type != MsgReject:
		return m, fmt.Errorf("%w: the server did not prove the cast key (does it run without -key?)", castkey.ErrAuth)
	}
	return m, nil
}

// ServerHandshake runs the server's half with a node that said hello h:
// the server proves it knows key, then the node must. Without a key there
// is nothing to do (a node that has one refuses such a server itself). An
// error says why the node is refused; telling the node is the caller's.
func ServerHandshake(c *Conn, key castkey.Key, h *Hello, timeout time.Duration) error {
	if key == nil {
		return nil
	}
	if len(h.Nonce) == 0 {
		return fmt.Errorf("%w: this cast needs the cast key: run dolly with -key FILE", castkey.ErrAuth)
	}
	hello := c.Transcript() // the hello as the server got it
	nonce := castkey.NewNonce()
	proof := ServerProof(key, h.Nonce, nonce, hello)
	if err := c.Send(Message{Type: MsgChallenge, Auth: &Auth{Nonce: nonce, Proof: proof}}); err != nil {
		return fmt.Errorf("%w: sending the challenge: %v", castkey.ErrAuth, err)
	}
	m, err := c.Recv(timeout)
	switch {
	case err != nil:
		return fmt.Errorf("%w: no proof: %v", castkey.ErrAuth, err)
	case m.Type == MsgFail:
		return fmt.Errorf("%s", m.Reason)
	case m.Type != MsgProof:
		return fmt.Errorf("%w: %s message instead of a proof", castkey.ErrAuth, m.Type)
	case !hmac.Equal(m.Auth.Proof, NodeProof(key, h.Nonce, nonce, hello)):
		return fmt.Errorf("%w: the node's proof does not match: it does not know the cast key, or its hello was altered on its way", castkey.ErrAuth)
	}
	c.Authenticate(key, h.Nonce, nonce, true)
	return nil
}

func controlProof(k castkey.Key, who string, nodeNonce, serverNonce, hello []byte) []byte {
	return castkey.MAC(k.Derive("control", nil), []byte(who), nodeNonce, serverNonce, hello)
}

func sessionKey(base, nodeNonce, serverNonce, transcript []byte) []byte {
	return castkey.MAC(base, []byte("session"), nodeNonce, serverNonce, transcript)
}

// ServerProof is what the server sends to show it knows the key: over
// both nonces and the hash of the hello it answers.
func ServerProof(k castkey.Key, nodeNonce, serverNonce, hello []byte) []byte {
	return controlProof(k, "server", nodeNonce, serverNonce, hello)
}

// NodeProof is what a node sends to show it knows the key.
func NodeProof(k castkey.Key, nodeNonce, serverNonce, hello []byte) []byte {
	return controlProof(k, "node", nodeNonce, serverNonce, hello)
}

// controlMAC tags control messages after the handshake.
type controlMAC struct {
	key        []byte
	sendLabel  byte // which way: a tag made one way is refused the other
	recvLabel  byte
	sent, recv uint64
}

const controlTagLen = sha256.Size

func (m *controlMAC) tag(label byte, seq uint64, body []byte) []byte {
	var h [9]byte
	h[0] = label
	binary.LittleEndian.PutUint64(h[1:], seq)
	return castkey.MAC(m.key, h[:], body)
}
