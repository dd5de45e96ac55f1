package stream

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"dolly/dolly/castkey"
)

// FrameKey authenticates (and, if Encrypt, encrypts) the frames of one
// cast. A nil *FrameKey means an unkeyed cast.
//
// The tag proves a frame came from someone holding the cast key, which
// every relay does. So the source also signs each frame with a key of its
// own (Sign), whose public half the nodes learn from the server
// (Trust): a relay that holds the cast key still cannot forge a frame.
type FrameKey struct {
	aead    cipher.AEAD
	Encrypt bool
	data    []byte // the data-connection handshake key
	buf     []byte // seal's output; a FrameKey seals for one encoder
	cast    CastID

	signer  ed25519.PrivateKey                  // the source's, to sign frames
	trusted atomic.Pointer[[]ed25519.PublicKey] // the sources' whose frames a node takes
}

// SigLen is the length of a frame's signature.
const SigLen = ed25519.SignatureSize

// Sign has the source sign every frame with priv from now on.
func (k *FrameKey) Sign(priv ed25519.PrivateKey) { k.signer = priv }

// Trust has a node take frames signed with pub, besides those of sources
// it trusted before (a server restarted during the cast signs with a key
// of its own). Safe to call while frames are read.
func (k *FrameKey) Trust(pub ed25519.PublicKey) {
	for {
		old := k.trusted.Load()
		var keys []ed25519.PublicKey
		if old != nil {
			keys = *old
		}
		for _, t := range keys {
			if t.Equal(pub) {
				return
			}
		}
		keys = append(append([]ed25519.PublicKey(nil), keys...), pub)
		if k.trusted.CompareAndSwap(old, &keys) {
			return
		}
	}
}

// trusts reports whether the node has a source's public key to check
// signatures with.
func (k *FrameKey) trusts() bool { return k.trusted.Load() != nil }

// signedMessage is what a frame's signature covers: the cast, the frame's
// header (sequence number, offset, length, the payload's CRC) and the
// SHA-256 of its payload as sent.
func (k *FrameKey) signedMessage(hdr, sent []byte) []byte {
	sum := sha256.Sum256(sent)
	m := make([]byte, 0, 16+len(k.cast)+len(hdr)+len(sum))
	m = append(m, "dolly frame v1\x00\x00"...)
	m = append(m, k.cast[:]...)
	m = append(m, hdr...)
	return append(m, sum[:]...)
}

// verifySig checks a frame's signature against the trusted sources' keys.
func (k *FrameKey) verifySig(hdr, sent, sig []byte) bool {
	keys := k.trusted.Load()
	if keys == nil {
		return false
	}
	m := k.signedMessage(hdr, sent)
	for _, pub := range *keys {
		if ed25519.Verify(pub, m, sig) {
			return true
		}
	}
	return false
}

// NewFrameKey derives the frame key of a cast.
func NewFrameKey(k castkey.Key, cast CastID, encrypt bool) *FrameKey {
	block, err := aes.NewCipher(k.Derive("frames", cast[:]))
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &FrameKey{aead: aead, Encrypt: encrypt, data: k.Derive("data", cast[:]), cast: cast}
}

// TagLen is the length of a frame's or the stream header's tag.
const TagLen = 16

// Nonces: a frame's is its sequence number; the header's cannot collide
// with any frame's.
func frameNonce(seq uint64) []byte {
	n := make([]byte, 12)
	binary.LittleEndian.PutUint64(n[4:], seq)
	return n
}

func headerNonce() []byte {
	n := make([]byte, 12)
	n[0] = 1
	return n
}

// sealHeader computes the header's tag over its first 64 bytes.
func (k *FrameKey) sealHeader(b []byte) []byte {
	return k.aead.Seal(nil, headerNonce(), nil, b)
}

// verifyHeader checks a header's tag.
func (k *FrameKey) verifyHeader(b, tag []byte) error {
	if _, err := k.aead.Open(nil, headerNonce(), tag, b); err != nil {
		return fmt.Errorf("stream header: %w", castkey.ErrAuth)
	}
	return nil
}

// seal protects a frame: it returns the tag and the payload to send (the
// payload itself, or its encryption in a buffer of the key's). hdr is the
// frame's header, covered by the tag. The results are valid until the
// next call.
//
// Without encryption the tag is still AES-GCM's, over the payload's
// encryption, which is not sent: the receiver encrypts the plaintext
// again to check it. That is as strong as GCM's own tag (an attacker
// knows less than usual, not more) and several times faster than GCM's
// authentication of additional data, which has no fast path.
func (k *FrameKey) seal(seq uint64, hdr, payload []byte) (sent, tag []byte) {
	k.buf = k.aead.Seal(k.buf[:0], frameNonce(seq), payload, hdr)
	sent = payload
	if k.Encrypt {
		sent = k.buf[:len(payload)]
	}
	if k.signer != nil {
		// The signature follows the tag: tag ‖ signature is the trailer.
		sig := ed25519.Sign(k.signer, k.signedMessage(hdr, sent))
		k.buf = append(k.buf, sig...)
		if k.Encrypt {
			sent = k.buf[:len(payload)]
		}
	}
	return sent, k.buf[len(payload):]
}

// open checks the tag of a frame: its header hdr, and body, which holds
// the payload (n bytes) and the trailer; it decrypts the payload in place
// if the cast is encrypted. scratch is a buffer to reuse; it is returned,
// grown if need be, for the next call.
func (k *FrameKey) open(seq uint64, hdr, body []byte, n int, signed bool, scratch []byte) ([]byte, error) {
	payload, tag := body[:n], body[n:n+TagLen]
	if signed && !k.verifySig(hdr, payload, body[n+TagLen:n+TagLen+SigLen]) {
		return scratch, errBadSignature
	}
	if k.Encrypt {
		if _, err := k.aead.Open(payload[:0], frameNonce(seq), body[:n+TagLen], hdr); err != nil {
			return scratch, castkey.ErrAuth
		}
		return scratch, nil
	}
	scratch = k.aead.Seal(scratch[:0], frameNonce(seq), payload, hdr)
	if subtle.ConstantTimeCompare(scratch[n:], tag) != 1 {
		return scratch, castkey.ErrAuth
	}
	return scratch, nil
}

// errBadSignature means a frame's tag may be right, but no source the node
// trusts signed it: a relay forged it.
var errBadSignature = fmt.Errorf("its signature is not the source's (a relay that holds the key forged it): %w", castkey.ErrAuth)

// dataProof is a data-connection handshake proof.
func (k *FrameKey) dataProof(token []byte, who string, parts ...[]byte) []byte {
	key := token // an unkeyed cast: the receiving node's token
	if k != nil {
		key = k.data
	}
	return castkey.MAC(key, append([][]byte{[]byte(who)}, parts...)...)
}
