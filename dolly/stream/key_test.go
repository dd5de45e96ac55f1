package stream

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"dolly/dolly/castkey"
	"dolly/imaging"
	"dolly/internal/testimage"
)

func testKey(t *testing.T) castkey.Key {
	t.Helper()
	k, err := castkey.ParseKey(string(castkey.NewKey()))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyedStreamsRoundTrip(t *testing.T) {
	imgs := makeImages(t, 3<<20+5, testimage.Typical)
	want, _ := testimage.SHA256(imgs[imaging.Raw], -1)
	k := testKey(t)
	for _, encrypt := range []bool{false, true} {
		for _, enc := range []imaging.Encoding{imaging.Raw, imaging.Zstd} {
			name := enc.String()
			if encrypt {
				name += "/encrypted"
			}
			t.Run(name, func(t *testing.T) {
				key := NewFrameKey(k, CastID{9}, encrypt)
				h, stream, _ := encodeKeyed(t, imgs[enc], 1<<20, 255, key)
				if err := h.Verify(key); err != nil {
					t.Fatalf("header: %v", err)
				}
				target, err := receiveKeyed(t, h, key, stream)
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := testimage.SHA256(target, h.ImageSize); got != want {
					t.Fatal("target differs from the image")
				}
				// Another key (another cast, or a stranger's) does not open it.
				other := NewFrameKey(testKey(t), CastID{9}, encrypt)
				if err := h.Verify(other); !errors.Is(err, castkey.ErrAuth) {
					t.Errorf("header verified under another key: %v", err)
				}
				if _, err := receiveKeyed(t, h, other, stream); !errors.Is(err, castkey.ErrAuth) {
					t.Errorf("stream received under another key: %v", err)
				}
			})
		}
	}
}

func TestEncryptedStreamHidesTheImage(t *testing.T) {
	imgs := makeImages(t, 2<<20, testimage.Dense)
	raw, _ := os.ReadFile(imgs[imaging.Raw])
	key := NewFrameKey(testKey(t), CastID{3}, true)
	_, stream, _ := encodeKeyed(t, imgs[imaging.Raw], 1<<20, 255, key)
	for _, off := range []int{0, 1 << 19, 3 << 19} {
		if bytes.Contains(stream, raw[off:off+64]) {
			t.Fatalf("image bytes at %d travel in the clear", off)
		}
	}
}

// TestManInTheMiddleIsCaught alters one byte of the second frame's payload
// the way an attacker would: fixing up the payload's CRC and the header's
// checksum so that every checksum still holds. An unkeyed stream then goes
// through; a keyed one is refused, and the altered frame never reaches the
// target while the frame before it does.
func TestManInTheMiddleIsCaught(t *testing.T) {
	imgs := makeImages(t, 3<<20, testimage.Dense)
	want, _ := os.ReadFile(imgs[imaging.Raw])
	const frame = 1 << 20
	alter := func(stream []byte, tagLen int) []byte {
		s := append([]byte(nil), stream...)
		second := FrameHeaderLen + frame + tagLen // the second frame's header
		s[second+FrameHeaderLen+100] ^= 0x40
		hdr := s[second : second+FrameHeaderLen]
		binary.LittleEndian.PutUint32(hdr[32:], imaging.CRC32C(s[second+FrameHeaderLen:][:frame]))
		binary.LittleEndian.PutUint32(hdr[36:], imaging.CRC32C(hdr[:36]))
		return s
	}

	h, stream, _ := encodeKeyed(t, imgs[imaging.Raw], frame, 255, nil)
	if _, err := receiveKeyed(t, h, nil, alter(stream, 0)); err == nil || !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("unkeyed: altered stream gave %v; the checksums alone should not catch it until the digest", err)
	}

	for _, encrypt := range []bool{false, true} {
		key := NewFrameKey(testKey(t), CastID{7}, encrypt)
		h, stream, _ := encodeKeyed(t, imgs[imaging.Raw], frame, 255, key)
		target, err := receiveKeyed(t, h, key, alter(stream, TagLen))
		if !errors.Is(err, castkey.ErrAuth) || !strings.Contains(err.Error(), "frame 1") {
			t.Fatalf("encrypt=%v: altered frame gave %v, want an authentication error on frame 1", encrypt, err)
		}
		got, _ := os.ReadFile(target)
		if !bytes.Equal(got[:frame], want[:frame]) {
			t.Errorf("encrypt=%v: the frame before the altered one was not written", encrypt)
		}
		if !bytes.Equal(got[frame:2*frame], bytes.Repeat([]byte{0xFF}, frame)) {
			t.Errorf("encrypt=%v: the altered frame reached the target", encrypt)
		}
	}
}

// TestDataHandshakeNeedsTheKey: the key in a keyed cast, the child's own
// token in an unkeyed one.
func TestDataHandshakeNeedsTheKey(t *testing.T) {
	k := testKey(t)
	right := NewFrameKey(k, CastID{1}, false)
	wrong := NewFrameKey(testKey(t), CastID{1}, false)
	h := StreamHeader{Version: Version, Encoding: imaging.Raw, FrameSize: 1 << 20, Cast: CastID{1}, ImageSize: 10, StreamSize: 10}
	h.seal(right)
	token, other := NewToken(), NewToken()
	unkeyed := h
	unkeyed.seal(nil)
	tests := []struct {
		name         string
		up, child    *FrameKey
		upTok, chTok []byte // unkeyed: the token the upstream was told, the child's own
		upOK, chOK   bool
	}{
		{"same key", right, right, nil, nil, true, true},
		{"child has another key", right, wrong, nil, nil, false, false},
		{"child has no key", right, nil, nil, nil, false, false},
		{"upstream has another key", wrong, right, nil, nil, false, false},
		{"unkeyed, the child's token", nil, nil, token, token, true, true},
		{"unkeyed, a stranger guesses no token", nil, nil, nil, token, false, false},
		{"unkeyed, another node's token", nil, nil, other, token, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			type res struct {
				pos int64
				err error
			}
			upc := make(chan res, 1)
			go func() {
				hdr := h
				if tt.up == nil {
					hdr = unkeyed
				}
				pos, err := OpenStream(a, hdr, tt.up, tt.upTok)
				upc <- res{pos, err}
				a.Close()
			}()
			in, err := AcceptStream(b)
			if err == nil {
				err = in.Verify(tt.child, tt.chTok)
			}
			if err == nil {
				err = in.Answer(tt.child, tt.chTok, 42)
			} else {
				b.Close()
			}
			if (err == nil) != tt.chOK {
				t.Errorf("child: %v", err)
			}
			r := <-upc
			if (r.err == nil) != tt.upOK || tt.upOK && r.pos != 42 {
				t.Errorf("upstream: pos %d, %v", r.pos, r.err)
			}
		})
	}
}

// BenchmarkFrameReader reads a 16 MiB raw stream: unkeyed, authenticated
// and encrypted, to show what checking tags costs a node.
func BenchmarkFrameReader(b *testing.B) {
	imgs := makeImages(b, 16<<20, testimage.Dense)
	k, _ := castkey.ParseKey(string(castkey.NewKey()))
	pub, priv, _ := ed25519.GenerateKey(nil)
	signed := func(encrypt bool) *FrameKey {
		key := NewFrameKey(k, CastID{1}, encrypt)
		key.Sign(priv) // the reader checks signatures, and its own signer is not used
		key.Trust(pub)
		return key
	}
	for _, bc := range []struct {
		name string
		key  *FrameKey
	}{
		{"unkeyed", nil},
		{"authenticated", NewFrameKey(k, CastID{1}, false)},
		{"encrypted", NewFrameKey(k, CastID{1}, true)},
		{"signed", signed(false)},
		{"signed+encrypted", signed(true)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, stream, _ := encodeKeyed(b, imgs[imaging.Raw], 1<<20, 255, bc.key)
			b.SetBytes(h.ImageSize)
			for b.Loop() {
				fr := NewFrameReader(bytes.NewReader(stream), h, bc.key)
				for {
					f, err := fr.Next()
					if err != nil {
						b.Fatal(err)
					}
					if f.Kind == FrameEnd {
						break
					}
				}
			}
		})
	}
}

// TestRelayHoldingTheKeyCannotForge plays a relay that holds the cast key
// and so can make valid tags: it alters the second frame and gives it a
// valid tag, or strips the source's signatures and seals the header anew
// without them. The node, which trusts only the source's signing key,
// refuses both, and the forged frame never reaches its target.
func TestRelayHoldingTheKeyCannotForge(t *testing.T) {
	imgs := makeImages(t, 3<<20, testimage.Dense)
	want, _ := os.ReadFile(imgs[imaging.Raw])
	const frame = 1 << 20
	k := testKey(t)
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, encrypt := range []bool{false, true} {
		source := NewFrameKey(k, CastID{9}, encrypt)
		source.Sign(priv)
		h, stream, _ := encodeKeyed(t, imgs[imaging.Raw], frame, 255, source)
		node := NewFrameKey(k, CastID{9}, encrypt)
		node.Trust(pub)
		if err := h.Verify(node); err != nil || h.Flags&FlagSigned == 0 {
			t.Fatalf("encrypt=%v: a signed header: flags %b, %v", encrypt, h.Flags, err)
		}
		target, err := receiveKeyed(t, h, node, stream)
		if err != nil {
			t.Fatalf("encrypt=%v: the source's own stream: %v", encrypt, err)
		}
		if got, _ := os.ReadFile(target); !bytes.Equal(got[:len(want)], want) {
			t.Fatalf("encrypt=%v: the target differs from the image", encrypt)
		}

		// The relay alters the second frame and tags it validly.
		relay := NewFrameKey(k, CastID{9}, encrypt)
		forged := append([]byte(nil), stream...)
		trailer := TagLen + SigLen
		second := FrameHeaderLen + frame + trailer
		hdr := forged[second : second+FrameHeaderLen]
		payload := bytes.Repeat([]byte{'!'}, frame)
		binary.LittleEndian.PutUint32(hdr[32:], imaging.CRC32C(payload))
		binary.LittleEndian.PutUint32(hdr[36:], imaging.CRC32C(hdr[:36]))
		sent, tag := relay.seal(1, hdr, payload)
		copy(forged[second+FrameHeaderLen:], sent)
		copy(forged[second+FrameHeaderLen+frame:], tag[:TagLen])
		target, err = receiveKeyed(t, h, node, forged)
		if !errors.Is(err, castkey.ErrAuth) || !strings.Contains(err.Error(), "signature") {
			t.Fatalf("encrypt=%v: a frame forged by a relay: %v", encrypt, err)
		}
		got, _ := os.ReadFile(target)
		if !bytes.Equal(got[:frame], want[:frame]) || bytes.Contains(got, payload[:4096]) {
			t.Errorf("encrypt=%v: the forged frame reached the target, or the one before it did not", encrypt)
		}

		// The relay drops the signatures: it seals the header anew without
		// them. A node that trusts a source takes no unsigned stream.
		stripped := h
		stripped.seal(relay)
		if err := stripped.Verify(node); !errors.Is(err, castkey.ErrAuth) || !strings.Contains(err.Error(), "not signed") {
			t.Errorf("encrypt=%v: an unsigned header: %v", encrypt, err)
		}
	}
}
