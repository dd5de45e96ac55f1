package stream

import (
	"crypto/hmac"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"dolly/dolly/castkey"
)

// A data connection opens with a handshake, which also lets each side of a
// keyed cast prove it knows the key before any image byte moves:
//
//	child    → upstream: a nonce
//	upstream → child:    the stream header, a nonce, the upstream's proof
//	child    → upstream: its position (the stream bytes it already has,
//	                     0 for a fresh start) and its proof
//
// and the upstream streams on from that position. So a child that lost its
// upstream resumes from the byte it had reached, from whichever node (or
// the source) it is given next. In an unkeyed cast the proofs are made
// without a key: they then only catch a peer that is not a dolly of this
// cast.

// handshakeTimeout bounds each side's wait for the other's half.
const handshakeTimeout = 30 * time.Second

const proofLen = 32

// OpenStream opens the stream with header h on c, an upstream's new
// connection to a child, and returns the position the child answered.
func OpenStream(c net.Conn, h StreamHeader, key *FrameKey) (int64, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	childNonce := make([]byte, castkey.NonceLen)
	if _, err := io.ReadFull(c, childNonce); err != nil {
		return 0, fmt.Errorf("reading the child's nonce: %w", err)
	}
	hb := h.MarshalBinary()
	nonce := castkey.NewNonce()
	msg := append(append(hb, nonce...), key.dataProof("upstream", childNonce, nonce, hb)...)
	if _, err := c.Write(msg); err != nil {
		return 0, fmt.Errorf("sending the stream header: %w", err)
	}
	var b [8 + proofLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("reading the child's position: %w", err)
	}
	if !hmac.Equal(b[8:], key.dataProof("child", childNonce, nonce, b[:8])) {
		return 0, fmt.Errorf("the child does not prove the cast key: %w", castkey.ErrAuth)
	}
	pos := int64(binary.LittleEndian.Uint64(b[:8]))
	if pos < 0 {
		return 0, fmt.Errorf("child's position %d out of range", pos)
	}
	return pos, nil
}

// Incoming is the upstream's half of a handshake a child has received.
type Incoming struct {
	c net.Conn
	// Header is the stream header the upstream sent; Verify checks it.
	Header        StreamHeader
	header        []byte
	nonce, theirs []byte
	proof         []byte
}

// AcceptStream sends a child's nonce on c and reads the upstream's header
// and proof, which Verify checks.
func AcceptStream(c net.Conn) (*Incoming, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	in := &Incoming{c: c, nonce: castkey.NewNonce()}
	if _, err := c.Write(in.nonce); err != nil {
		return nil, err
	}
	b := make([]byte, StreamHeaderLen+castkey.NonceLen+proofLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	h, err := ParseStreamHeader(b[:StreamHeaderLen])
	if err != nil {
		return nil, err
	}
	in.Header, in.header = h, b[:StreamHeaderLen]
	in.theirs, in.proof = b[StreamHeaderLen:StreamHeaderLen+castkey.NonceLen], b[StreamHeaderLen+castkey.NonceLen:]
	return in, nil
}

// Verify checks the upstream's proof and the header's protection.
func (in *Incoming) Verify(key *FrameKey) error {
	if !hmac.Equal(in.proof, key.dataProof("upstream", in.nonce, in.theirs, in.header)) {
		return fmt.Errorf("the upstream does not prove the cast key: %w", castkey.ErrAuth)
	}
	return in.Header.Verify(key)
}

// Answer sends the position to stream from, with the child's proof.
func (in *Incoming) Answer(key *FrameKey, pos int64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(pos))
	in.c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	defer in.c.SetWriteDeadline(time.Time{})
	_, err := in.c.Write(append(b[:], key.dataProof("child", in.nonce, in.theirs, b[:])...))
	return err
}
