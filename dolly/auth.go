package dolly

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// A cast key is a secret the server and its nodes share (dolly key makes
// one; -key FILE reads it). Nothing derived from it crosses the network in
// a form that gives it away:
//
//   - The control connection opens with a challenge-response in both
//     directions (HMAC-SHA256 over fresh nonces from each side), the server
//     answering first, so a node learns before it touches its target that
//     the server knows the key. Every later message carries an HMAC under a
//     key for that connection alone, with a sequence number against replay.
//   - Each data connection opens with the same kind of exchange, so a relay
//     sends the image only to a child that knows the key, and a child takes
//     a stream only from an upstream that does.
//   - Every frame carries an AES-GCM tag under a key derived for the cast;
//     with -encrypt the payload is also encrypted. Relays forward frames
//     verbatim and only the nodes check (and decrypt) them, each before its
//     frame reaches the disk.

// Key is a cast key's secret.
type Key []byte

// minKeyLen is the shortest secret taken: shorter ones are guessable.
const minKeyLen = 16

// NewKey makes a random cast key, as dolly key writes it: 64 hex digits.
func NewKey() Key {
	var b [32]byte
	rand.Read(b[:])
	return Key(hex.EncodeToString(b[:]))
}

// ParseKey takes a key's text (a file's content, or dolly.key= on a kernel
// command line); surrounding space does not count.
func ParseKey(text string) (Key, error) {
	k := strings.TrimSpace(text)
	if len(k) < minKeyLen {
		return nil, fmt.Errorf("cast key of %d characters is too short (at least %d): make one with \"dolly key -o FILE\"", len(k), minKeyLen)
	}
	return Key(k), nil
}

// ReadKeyFile reads a cast key from a file.
func ReadKeyFile(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cast key: %w", err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("cast key %s: %w", path, err)
	}
	return k, nil
}

// derive makes a sub-key for one purpose, so that no two uses of the
// cast key share a key.
func (k Key) derive(purpose string, salt []byte) []byte {
	out, err := hkdf.Key(sha256.New, k, salt, "dolly "+purpose, 32)
	if err != nil {
		panic(err) // only for lengths hkdf cannot make
	}
	return out
}

func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(p)))
		m.Write(l[:]) // lengths keep the parts apart
		m.Write(p)
	}
	return m.Sum(nil)
}

// ErrAuth means the other side could not prove it knows the cast key, or
// a message or frame did not carry a valid tag.
var ErrAuth = errors.New("authentication failed")

const nonceLen = 16

func newNonce() []byte {
	b := make([]byte, nonceLen)
	rand.Read(b)
	return b
}

// Control-connection proofs. The node's nonce comes in its hello; the
// server answers with its nonce and its proof; the node checks that and
// answers with its own proof.

func controlProof(k Key, who string, nodeNonce, serverNonce []byte, name string) []byte {
	return mac(k.derive("control", nil), []byte(who), nodeNonce, serverNonce, []byte(name))
}

func sessionKey(k Key, nodeNonce, serverNonce []byte) []byte {
	return mac(k.derive("control", nil), []byte("session"), nodeNonce, serverNonce)
}

// ServerProof is what the server sends to show it knows the key.
func ServerProof(k Key, nodeNonce, serverNonce []byte, name string) []byte {
	return controlProof(k, "server", nodeNonce, serverNonce, name)
}

// NodeProof is what a node sends to show it knows the key.
func NodeProof(k Key, nodeNonce, serverNonce []byte, name string) []byte {
	return controlProof(k, "node", nodeNonce, serverNonce, name)
}

// FrameKey authenticates (and, if Encrypt, encrypts) the frames of one
// cast. A nil *FrameKey means an unkeyed cast.
type FrameKey struct {
	aead    cipher.AEAD
	Encrypt bool
	data    []byte // the data-connection handshake key
	buf     []byte // seal's output; a FrameKey seals for one encoder
}

// NewFrameKey derives the frame key of a cast.
func NewFrameKey(k Key, cast CastID, encrypt bool) *FrameKey {
	block, err := aes.NewCipher(k.derive("frames", cast[:]))
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &FrameKey{aead: aead, Encrypt: encrypt, data: k.derive("data", cast[:])}
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
		return fmt.Errorf("stream header: %w", ErrAuth)
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
			return scratch, ErrAuth
		}
		return scratch, nil
	}
	scratch = k.aead.Seal(scratch[:0], frameNonce(seq), payload, hdr)
	if subtle.ConstantTimeCompare(scratch[n:], tag) != 1 {
		return scratch, ErrAuth
	}
	return scratch, nil
}

// dataProof is a data-connection handshake proof.
func (k *FrameKey) dataProof(who string, parts ...[]byte) []byte {
	var key []byte
	if k != nil {
		key = k.data
	}
	return mac(key, append([][]byte{[]byte(who)}, parts...)...)
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
	return mac(m.key, h[:], body)
}
