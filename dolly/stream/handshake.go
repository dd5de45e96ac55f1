package stream

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"errors"
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
// with the child's token (see NewToken) in place of the key: only a peer
// the server sent to that child can open its stream.

// A bandwidth probe opens a data connection the same way, but sends a probe
// preamble (its magic and a probe ID) in place of the stream header, then
// bytes to count, and the child answers nothing: see OpenProbe.

// handshakeTimeout bounds each side's wait for the other's half.
const handshakeTimeout = 30 * time.Second

const proofLen = 32

// TokenLen is the length of a node's data token.
const TokenLen = 16

// NewToken makes a node's data token. In a cast without a key the server
// gives each node its own and tells it only to the peers it sends to that
// node: the data handshake's proofs are made with it, so a stranger who
// knows the cast cannot become a node's upstream. In a keyed cast the key
// does that, and tokens are not used.
func NewToken() []byte { return castkey.NewNonce()[:TokenLen] }

// OpenStream opens the stream with header h on c, an upstream's new
// connection to a child, and returns the position the child answered.
// token is the child's (unkeyed casts).
func OpenStream(c net.Conn, h StreamHeader, key *FrameKey, token []byte) (int64, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	childNonce := make([]byte, castkey.NonceLen)
	if _, err := io.ReadFull(c, childNonce); err != nil {
		return 0, fmt.Errorf("reading the child's nonce: %w", err)
	}
	hb := h.MarshalBinary()
	nonce := castkey.NewNonce()
	msg := append(append(hb, nonce...), key.dataProof(token, "upstream", childNonce, nonce, hb)...)
	if _, err := c.Write(msg); err != nil {
		return 0, fmt.Errorf("sending the stream header: %w", err)
	}
	var b [8 + proofLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("reading the child's position: %w", err)
	}
	if !hmac.Equal(b[8:], key.dataProof(token, "child", childNonce, nonce, b[:8])) {
		return 0, fmt.Errorf("the child does not prove the cast key: %w", castkey.ErrAuth)
	}
	pos := int64(binary.LittleEndian.Uint64(b[:8]))
	if pos < 0 {
		return 0, fmt.Errorf("child's position %d out of range", pos)
	}
	return pos, nil
}

// probeMagic opens a bandwidth probe's preamble where a stream header
// would be.
var probeMagic = [8]byte{'D', 'O', 'L', 'L', 'Y', 'P', 'R', 'B'}

// OpenProbe opens a bandwidth probe with ID id on c, a new connection to a
// node's data listener: once it returns, what is written to c is counted
// and thrown away by the node.
func OpenProbe(c net.Conn, id uint64, key *FrameKey, token []byte) error {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	childNonce := make([]byte, castkey.NonceLen)
	if _, err := io.ReadFull(c, childNonce); err != nil {
		return fmt.Errorf("reading the node's nonce: %w", err)
	}
	pre := make([]byte, StreamHeaderLen)
	copy(pre, probeMagic[:])
	binary.LittleEndian.PutUint64(pre[8:], id)
	nonce := castkey.NewNonce()
	msg := append(append(pre, nonce...), key.dataProof(token, "probe", childNonce, nonce, pre)...)
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("opening the probe: %w", err)
	}
	return nil
}

// Incoming is the upstream's half of a handshake a child has received.
type Incoming struct {
	c net.Conn
	// Probe is the ID of a bandwidth probe (OpenProbe); 0 for a stream.
	Probe uint64
	// Header is the stream header the upstream sent; Verify checks it.
	Header        StreamHeader
	header        []byte
	nonce, theirs []byte
	proof         []byte
}

// AcceptStream sends a child's nonce on c and reads the upstream's header
// (or a probe's preamble) and proof, which Verify checks.
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
	in.header = b[:StreamHeaderLen]
	in.theirs, in.proof = b[StreamHeaderLen:StreamHeaderLen+castkey.NonceLen], b[StreamHeaderLen+castkey.NonceLen:]
	if bytes.HasPrefix(b, probeMagic[:]) {
		if in.Probe = binary.LittleEndian.Uint64(b[8:]); in.Probe == 0 {
			return nil, errors.New("probe without an ID")
		}
		return in, nil
	}
	h, err := ParseStreamHeader(in.header)
	if err != nil {
		return nil, err
	}
	in.Header = h
	return in, nil
}

// Verify checks the upstream's proof and the header's protection; token
// is this node's own (unkeyed casts).
func (in *Incoming) Verify(key *FrameKey, token []byte) error {
	if in.Probe != 0 {
		if !hmac.Equal(in.proof, key.dataProof(token, "probe", in.nonce, in.theirs, in.header)) {
			return fmt.Errorf("the prober does not prove the cast key: %w", castkey.ErrAuth)
		}
		return nil
	}
	if !hmac.Equal(in.proof, key.dataProof(token, "upstream", in.nonce, in.theirs, in.header)) {
		return fmt.Errorf("the upstream does not prove the cast key: %w", castkey.ErrAuth)
	}
	return in.Header.Verify(key)
}

// Answer sends the position to stream from, with the child's proof.
func (in *Incoming) Answer(key *FrameKey, token []byte, pos int64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(pos))
	in.c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	defer in.c.SetWriteDeadline(time.Time{})
	_, err := in.c.Write(append(b[:], key.dataProof(token, "child", in.nonce, in.theirs, b[:])...))
	return err
}
