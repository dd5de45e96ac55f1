package control

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"dolly/dolly/castkey"
)

// Enrollment lets a node that holds no cast key join a keyed cast: a
// netbooted PC, whose kernel command line anyone on the network can read,
// carries only the server's public key (castkey.Key.Identity). The node's
// hello carries a nonce and an ephemeral X25519 key; the server answers
// with its nonce, its own ephemeral key and its identity's signature over
// the hello, both nonces and its key; the node checks the signature, both
// derive a secret from the X25519 exchange, and the node proves it has it.
// From then on messages are tagged under a session key made from that
// secret, and the server, if it admits the node, hands it the cast key
// sealed under the secret in its welcome. So the key never crosses the
// network in a form anyone else can read, and a node never acts on a
// server that cannot sign as the one it was told of.

// NewEnrollKey makes a node's ephemeral X25519 key for one hello.
func NewEnrollKey() *ecdh.PrivateKey {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // the system's randomness failed
	}
	return k
}

// enrollSigned is what the server's identity signs.
func enrollSigned(hello, nodeNonce, serverNonce, serverEphemeral []byte) []byte {
	return castkey.MAC([]byte("dolly enroll v1"), hello, nodeNonce, serverNonce, serverEphemeral)
}

// enrollSecret is the secret both ends derive from the exchange, bound to
// the hello and both nonces.
func enrollSecret(shared, hello, nodeNonce, serverNonce []byte) []byte {
	return castkey.MAC(shared, []byte("dolly enroll secret"), hello, nodeNonce, serverNonce)
}

// NodeEnroll runs an enrolling node's half after it sent a hello carrying
// nonce and eph's public key: it checks that the server signs as server,
// proves it agreed the secret, and returns the server's next message (a
// welcome, a reject or an abort) and the secret, which opens the cast key
// in the welcome (OpenCastKey).
func NodeEnroll(c *Conn, server ed25519.PublicKey, nonce []byte, eph *ecdh.PrivateKey, timeout time.Duration) (Message, []byte, error) {
	hello := c.Transcript()
	m, err := c.Recv(timeout)
	if err != nil {
		return m, nil, err
	}
	switch {
	case m.Type == MsgReject || m.Type == MsgAbort:
		return m, nil, nil
	case m.Type != MsgChallenge || len(m.Auth.Signature) == 0:
		return m, nil, fmt.Errorf("%w: the server did not prove its identity (does it run without -key?)", castkey.ErrAuth)
	}
	if !ed25519.Verify(server, enrollSigned(hello, nonce, m.Auth.Nonce, m.Auth.Ephemeral), m.Auth.Signature) {
		c.Send(Message{Type: MsgFail, Reason: "authentication failed: the server does not sign as the server key this node was given"})
		return m, nil, fmt.Errorf("%w: the server does not sign as the server key this node was given (another server, or another cast key), or this node's hello was altered on its way", castkey.ErrAuth)
	}
	peer, err := ecdh.X25519().NewPublicKey(m.Auth.Ephemeral)
	if err != nil {
		return m, nil, fmt.Errorf("%w: the server's ephemeral key: %v", castkey.ErrAuth, err)
	}
	shared, err := eph.ECDH(peer)
	if err != nil {
		return m, nil, fmt.Errorf("%w: key exchange: %v", castkey.ErrAuth, err)
	}
	secret := enrollSecret(shared, hello, nonce, m.Auth.Nonce)
	proof := castkey.MAC(secret, []byte("node"), nonce, m.Auth.Nonce)
	if err := c.Send(Message{Type: MsgProof, Auth: &Auth{Proof: proof}}); err != nil {
		return m, nil, err
	}
	c.authenticate(secret, nonce, m.Auth.Nonce, false)
	m, err = c.Recv(timeout)
	return m, secret, err
}

// ServerEnroll runs the server's half with a node whose hello h asks to
// enroll: it signs with identity (castkey.Key.Identity), agrees a secret with the node and
// checks the node has it. It returns the secret, under which the welcome
// hands the node the cast key (SealCastKey). Admitting the node is the
// caller's to decide. An error says why the node is refused.
func ServerEnroll(c *Conn, identity ed25519.PrivateKey, h *Hello, timeout time.Duration) ([]byte, error) {
	if identity == nil {
		return nil, errors.New("this cast has no key to enroll nodes with: give dolly-server -key, or run the node without -server-key")
	}
	if len(h.Nonce) != castkey.NonceLen {
		return nil, fmt.Errorf("%w: an enrolling hello without its nonce", castkey.ErrAuth)
	}
	peer, err := ecdh.X25519().NewPublicKey(h.Enroll)
	if err != nil {
		return nil, fmt.Errorf("%w: the node's ephemeral key: %v", castkey.ErrAuth, err)
	}
	hello := c.Transcript()
	eph := NewEnrollKey()
	nonce := castkey.NewNonce()
	sig := ed25519.Sign(identity, enrollSigned(hello, h.Nonce, nonce, eph.PublicKey().Bytes()))
	if err := c.Send(Message{Type: MsgChallenge, Auth: &Auth{Nonce: nonce, Ephemeral: eph.PublicKey().Bytes(), Signature: sig}}); err != nil {
		return nil, fmt.Errorf("%w: sending the challenge: %v", castkey.ErrAuth, err)
	}
	shared, err := eph.ECDH(peer)
	if err != nil {
		return nil, fmt.Errorf("%w: key exchange: %v", castkey.ErrAuth, err)
	}
	secret := enrollSecret(shared, hello, h.Nonce, nonce)
	m, err := c.Recv(timeout)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: no proof: %v", castkey.ErrAuth, err)
	case m.Type == MsgFail:
		return nil, fmt.Errorf("%s", m.Reason)
	case m.Type != MsgProof:
		return nil, fmt.Errorf("%w: %s message instead of a proof", castkey.ErrAuth, m.Type)
	case !hmac.Equal(m.Auth.Proof, castkey.MAC(secret, []byte("node"), h.Nonce, nonce)):
		return nil, fmt.Errorf("%w: the node did not agree the enrollment's secret", castkey.ErrAuth)
	}
	c.authenticate(secret, h.Nonce, nonce, true)
	return secret, nil
}

// sealAEAD is the cipher that carries the cast key to an enrolled node:
// its key is made from the enrollment's secret, used for this one seal.
func sealAEAD(secret []byte) cipher.AEAD {
	block, err := aes.NewCipher(castkey.MAC(secret, []byte("dolly cast key")))
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// SealCastKey seals the cast key for an enrolled node.
func SealCastKey(secret []byte, key castkey.Key) []byte {
	return sealAEAD(secret).Seal(nil, make([]byte, 12), key, nil)
}

// OpenCastKey opens the cast key an enrolled node's welcome carries.
func OpenCastKey(secret, sealed []byte) (castkey.Key, error) {
	key, err := sealAEAD(secret).Open(nil, make([]byte, 12), sealed, nil)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: the cast key in the welcome does not open", castkey.ErrAuth)
	}
	return castkey.Key(key), nil
}

// signKeySigned is what the server's identity signs of the key it signs
// frames with: nodes take no other.
func signKeySigned(cast [16]byte, signKey []byte) []byte {
	return castkey.MAC([]byte("dolly sign key v1"), cast[:], signKey)
}

// SignSignKey signs the frame-signing key signKey of cast with identity,
// for the welcome.
func SignSignKey(identity ed25519.PrivateKey, cast [16]byte, signKey []byte) []byte {
	return ed25519.Sign(identity, signKeySigned(cast, signKey))
}

// CheckSignKey checks the welcome's frame-signing key against the server's
// identity: whoever else holds the cast key (a relay, an enrolled node)
// could otherwise hand a node a key of its own.
func CheckSignKey(server ed25519.PublicKey, cast [16]byte, w *Welcome) (ed25519.PublicKey, error) {
	if len(w.SignKey) != ed25519.PublicKeySize || !ed25519.Verify(server, signKeySigned(cast, w.SignKey), w.SignKeySig) {
		return nil, fmt.Errorf("%w: the server's frame-signing key is not signed by the server key", castkey.ErrAuth)
	}
	return ed25519.PublicKey(w.SignKey), nil
}
