package stream

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"fmt"

	"dolly/dolly/castkey"
)

// FrameKey authenticates (and, if Encrypt, encrypts) the frames of one
// cast. A nil *FrameKey means an unkeyed cast.
type FrameKey struct {
	aead    cipher.AEAD
	Encrypt bool
	data    []byte // the data-connection handshake key
	buf     []byte // seal's output; a FrameKey seals for one encoder
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
	return &FrameKey{aead: aead, Encrypt: encrypt, data: k.Derive("data", cast[:])}
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
	if k.Encrypt {
		return k.buf[:len(payload)], k.buf[len(payload):]
	}
	return payload, k.buf[len(payload):]
}

// open checks the tag of frame, which holds the frame's header (hdrLen
// bytes), payload (n bytes) and tag, decrypting the payload in place if
// the cast is encrypted. scratch is a buffer to reuse; it is returned,
// grown if need be, for the next call.
func (k *FrameKey) open(seq uint64, frame []byte, hdrLen, n int, scratch []byte) ([]byte, error) {
	hdr, payload, tag := frame[:hdrLen], frame[hdrLen:hdrLen+n], frame[hdrLen+n:hdrLen+n+TagLen]
	if k.Encrypt {
		if _, err := k.aead.Open(payload[:0], frameNonce(seq), frame[hdrLen:hdrLen+n+TagLen], hdr); err != nil {
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

// dataProof is a data-connection handshake proof.
func (k *FrameKey) dataProof(token []byte, who string, parts ...[]byte) []byte {
	key := token // an unkeyed cast: the receiving node's token
	if k != nil {
		key = k.data
	}
	return castkey.MAC(key, append([][]byte{[]byte(who)}, parts...)...)
}
