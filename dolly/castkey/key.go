// Package castkey holds the cast key, the secret a keyed cast's server and
// nodes share, and the derivations every keyed part of the protocol uses.
package castkey

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
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

// A key is either random (dolly key writes 64 hex digits; any run of at
// least minRandomHex hex digits counts) and taken as it is, or a
// passphrase: then at least minPassphrase characters, stretched with
// PBKDF2 so that each guess costs an attacker what it costs a node to
// start.
const (
	minRandomHex     = 32 // 128 bits
	minPassphrase    = 20
	passphraseRounds = 600_000
)

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
	if len(k) >= minRandomHex && isHex(k) {
		return Key(k), nil
	}
	if len(k) < minPassphrase {
		return nil, fmt.Errorf("cast key of %d characters is too short: make one with \"dolly key -o FILE\" (or use a passphrase of at least %d characters)", len(k), minPassphrase)
	}
	stretched, err := pbkdf2.Key(sha256.New, k, []byte("dolly cast key passphrase"), passphraseRounds, 32)
	if err != nil {
		return nil, fmt.Errorf("stretching the passphrase: %w", err)
	}
	return Key(stretched), nil
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdefABCDEF") == ""
}

// FileWarning says what is wrong with how a key file is kept, or "": one
// that others can read (or write) gives the cast away.
func FileWarning(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Sprintf("key file %s can be read or written by others (mode %04o): chmod 600 %s", path, perm, path)
	}
	return ""
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

// Derive makes a sub-key for one purpose, so that no two uses of the
// cast key share a key.
func (k Key) Derive(purpose string, salt []byte) []byte {
	out, err := hkdf.Key(sha256.New, k, salt, "dolly "+purpose, 32)
	if err != nil {
		panic(err) // only for lengths hkdf cannot make
	}
	return out
}

// MAC is HMAC-SHA256 over parts, each prefixed with its length.
func MAC(key []byte, parts ...[]byte) []byte {
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

// NonceLen is the length of every handshake nonce.
const NonceLen = 16

// NewNonce makes a fresh random nonce.
func NewNonce() []byte {
	b := make([]byte, NonceLen)
	rand.Read(b)
	return b
}

// Identity is the server's signing key for the key file's key k: what a
// node checks the server against, given only its public half (a netbooted
// PC), or derived like the server (one with the key file). It is derived
// from k, so every server run with the same key has the same identity and
// no file more is kept; the public half tells nothing of k.
func (k Key) Identity() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(k.Derive("server identity", nil))
}

// Shared is the key every keyed part of a cast runs under (control proofs
// and tags, frame keys, data handshakes): derived from the key file's k,
// and all an enrolled node is handed. It does not give the Identity
// away, so a node that enrolled cannot pose as the server.
func (k Key) Shared() Key {
	return Key(k.Derive("shared cast key", nil))
}

// Capture is the key a capture (dolly capture to dolly-server -capture)
// runs under: derived from the key file's k, and never handed to an
// enrolled node, so only a holder of the key file can send the image the
// lab is cast from, or pose as the server that stores it.
func (k Key) Capture() Key {
	return Key(k.Derive("capture key", nil))
}

// ServerKey is the text form of a server's public key, as dolly.serverkey=
// and dolly -server-key take it.
func ServerKey(pub ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(pub) }

// ParseServerKey reads a server's public key in its text form.
func ParseServerKey(text string) (ed25519.PublicKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("server key %q: want the %d-character key dolly-server prints", text, base64.RawURLEncoding.EncodedLen(ed25519.PublicKeySize))
	}
	return ed25519.PublicKey(b), nil
}
