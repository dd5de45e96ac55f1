// Package stream is the data stream dolly-server sends and every node
// relays verbatim: a header, then frames (data, zero run, end), each
// checked (and in a keyed cast authenticated) before it reaches a disk.
// It holds the encoder that makes the stream, the receiver that writes it
// to a target, and the handshake that opens each data connection.
package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"dolly/dolly/castkey"
	"dolly/imaging"
)

// Version is the protocol version; both ends must speak the same one.
const Version = 4

// Stream layout: a StreamHeader, then frames, each a FrameHeader followed by
// its payload and, in a keyed cast, its tag (TagLen bytes). All integers
// are little-endian.
const (
	StreamHeaderLen = 64 + TagLen
	FrameHeaderLen  = 40
	endPayloadLen   = 48

	// MaxFrameSize bounds the payload of one data frame, so a reader never
	// allocates more than this for a frame whatever the stream says.
	MaxFrameSize = 64 << 20
	// DefaultFrameSize is the default segment size: large enough that frame
	// overhead is negligible, small enough that each hop adds little delay.
	DefaultFrameSize = 1 << 20
	// maxZeroFrame caps one zero frame so progress moves smoothly even over
	// terabytes of free space.
	maxZeroFrame = 256 << 20
)

var (
	streamMagic = [8]byte{'D', 'O', 'L', 'L', 'Y', 'S', 'T', 'M'}
	frameMagic  = [4]byte{'D', 'F', 'R', 'M'}
)

// CastID identifies one cast; nodes accept only the stream of their cast.
type CastID [16]byte

func (c CastID) String() string { return fmt.Sprintf("%x", c[:]) }

// StreamHeader opens the data stream.
type StreamHeader struct {
	Version   uint16
	Encoding  imaging.Encoding
	FrameSize uint32 // largest data payload
	Cast      CastID
	ImageSize int64 // raw bytes each node writes
	// StreamSize is the number of bytes the frames carry: the image as
	// stored, or 0 when the source compresses it on the fly and cannot
	// know the size in advance.
	StreamSize int64
	// Flags say whether frames carry tags and whether payloads are
	// encrypted; Tag authenticates the header in a keyed cast.
	Flags StreamFlags
	Tag   [TagLen]byte
}

// StreamFlags describe how frames are protected.
type StreamFlags uint8

const (
	FlagAuthenticated StreamFlags = 1 << iota // every frame carries a tag
	FlagEncrypted                             // payloads are encrypted
	FlagSigned                                // every frame's tag is followed by the source's signature
)

// Keyed reports whether frames carry tags.
func (f StreamFlags) Keyed() bool { return f&FlagAuthenticated != 0 }

// MarshalBinary encodes the header.
func (h StreamHeader) MarshalBinary() []byte {
	b := make([]byte, StreamHeaderLen)
	copy(b[0:8], streamMagic[:])
	binary.LittleEndian.PutUint16(b[8:], h.Version)
	b[10] = byte(h.Encoding)
	b[11] = byte(h.Flags)
	binary.LittleEndian.PutUint32(b[12:], h.FrameSize)
	copy(b[16:32], h.Cast[:])
	binary.LittleEndian.PutUint64(b[32:], uint64(h.ImageSize))
	binary.LittleEndian.PutUint64(b[40:], uint64(h.StreamSize))
	binary.LittleEndian.PutUint32(b[60:], imaging.CRC32C(b[:60]))
	copy(b[64:], h.Tag[:])
	return b
}

// seal sets the header's flags and tag for key (nil: an unkeyed cast).
func (h *StreamHeader) seal(key *FrameKey) {
	h.Flags, h.Tag = 0, [TagLen]byte{}
	if key == nil {
		return
	}
	h.Flags = FlagAuthenticated
	if key.Encrypt {
		h.Flags |= FlagEncrypted
	}
	if key.signer != nil {
		h.Flags |= FlagSigned
	}
	copy(h.Tag[:], key.sealHeader(h.MarshalBinary()[:64]))
}

// Verify checks that the header is protected as key says the cast is, and
// that its tag is right.
func (h StreamHeader) Verify(key *FrameKey) error {
	switch {
	case key == nil && h.Flags != 0:
		return fmt.Errorf("stream header: a keyed stream, but this node has no cast key: %w", castkey.ErrAuth)
	case key == nil:
		return nil
	case !h.Flags.Keyed():
		return fmt.Errorf("stream header: an unauthenticated stream in a keyed cast: %w", castkey.ErrAuth)
	case key.Encrypt != (h.Flags&FlagEncrypted != 0):
		return fmt.Errorf("stream header: encryption differs from the cast's: %w", castkey.ErrAuth)
	case key.trusts() && h.Flags&FlagSigned == 0:
		return fmt.Errorf("stream header: frames not signed by the source, which signs them: %w", castkey.ErrAuth)
	case !key.trusts() && h.Flags&FlagSigned != 0:
		return fmt.Errorf("stream header: signed frames, but the server gave no key to check them with: %w", castkey.ErrAuth)
	}
	return key.verifyHeader(h.MarshalBinary()[:64], h.Tag[:])
}

// trailerLen is what follows each frame's payload: its tag and, in a
// signed stream, the source's signature.
func (h StreamHeader) trailerLen() int {
	switch {
	case h.Flags&FlagSigned != 0:
		return TagLen + SigLen
	case h.Flags.Keyed():
		return TagLen
	}
	return 0
}

// ErrNotDolly means the peer did not speak the dolly stream protocol.
var ErrNotDolly = errors.New("not a dolly stream")

// ParseStreamHeader decodes and validates a header.
func ParseStreamHeader(b []byte) (StreamHeader, error) {
	var h StreamHeader
	if len(b) < StreamHeaderLen {
		return h, fmt.Errorf("stream header: %d bytes, want %d", len(b), StreamHeaderLen)
	}
	if !bytes.Equal(b[0:8], streamMagic[:]) {
		return h, ErrNotDolly
	}
	if got, want := binary.LittleEndian.Uint32(b[60:]), imaging.CRC32C(b[:60]); got != want {
		return h, fmt.Errorf("stream header: checksum mismatch")
	}
	h.Version = binary.LittleEndian.Uint16(b[8:])
	if h.Version != Version {
		return h, fmt.Errorf("stream header: protocol version %d, this node speaks %d: run the same dolly version on server and nodes", h.Version, Version)
	}
	h.Encoding = imaging.Encoding(b[10])
	h.Flags = StreamFlags(b[11])
	copy(h.Tag[:], b[64:StreamHeaderLen])
	h.FrameSize = binary.LittleEndian.Uint32(b[12:])
	copy(h.Cast[:], b[16:32])
	h.ImageSize = int64(binary.LittleEndian.Uint64(b[32:]))
	h.StreamSize = int64(binary.LittleEndian.Uint64(b[40:]))
	switch {
	case h.Flags&^(FlagAuthenticated|FlagEncrypted|FlagSigned) != 0 || h.Flags != 0 && !h.Flags.Keyed():
		return h, fmt.Errorf("stream header: unknown flags %#x", b[11])
	case h.Encoding != imaging.Raw && !h.Encoding.Compressed():
		return h, fmt.Errorf("stream header: unknown encoding %d", b[10])
	case h.FrameSize == 0 || h.FrameSize > MaxFrameSize:
		return h, fmt.Errorf("stream header: frame size %d out of range (1..%d)", h.FrameSize, MaxFrameSize)
	case h.ImageSize <= 0 || h.StreamSize < 0:
		return h, fmt.Errorf("stream header: bad sizes (image %d, stream %d)", h.ImageSize, h.StreamSize)
	case h.Encoding == imaging.Raw && h.ImageSize != h.StreamSize:
		return h, fmt.Errorf("stream header: raw image of %d bytes in a stream of %d", h.ImageSize, h.StreamSize)
	}
	return h, nil
}

// FrameKind tells what a frame carries.
type FrameKind uint8

const (
	FrameData FrameKind = 1 // payload bytes at Offset
	FrameZero FrameKind = 2 // Length zero bytes at Offset, no payload
	FrameEnd  FrameKind = 3 // the source's digest; the stream is complete
)

func (k FrameKind) String() string {
	switch k {
	case FrameData:
		return "data"
	case FrameZero:
		return "zero"
	case FrameEnd:
		return "end"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Frame is one decoded frame. Payload aliases the reader's buffer and is
// valid until the next call to Next.
type Frame struct {
	Kind   FrameKind
	Seq    uint64
	Offset int64 // raw offset (raw streams) or stored-image offset (compressed)
	Length int64 // payload bytes, or the zero run's length
	CRC    uint32
	// Payload holds the data of a data frame.
	Payload []byte
	// pieces, when known, are the CRC-32Cs of a raw payload's parts split
	// where the image's digest blocks end (see payloadSum).
	pieces []uint32
}

// End is what the end frame carries.
type End struct {
	Digest imaging.Digest // content digest of the whole raw image
	Size   int64
	Frames uint64 // frames before the end frame
}

// AppendFrameHeader appends the encoded header of f (whose CRC must already
// be set for data frames).
func AppendFrameHeader(dst []byte, f Frame) []byte {
	var b [FrameHeaderLen]byte
	copy(b[0:4], frameMagic[:])
	b[4] = byte(f.Kind)
	binary.LittleEndian.PutUint64(b[8:], f.Seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(f.Offset))
	binary.LittleEndian.PutUint64(b[24:], uint64(f.Length))
	binary.LittleEndian.PutUint32(b[32:], f.CRC)
	binary.LittleEndian.PutUint32(b[36:], imaging.CRC32C(b[:36]))
	return append(dst, b[:]...)
}

func (e End) marshal() []byte {
	b := make([]byte, endPayloadLen)
	copy(b[0:32], e.Digest[:])
	binary.LittleEndian.PutUint64(b[32:], uint64(e.Size))
	binary.LittleEndian.PutUint64(b[40:], e.Frames)
	return b
}

// EndFrame encodes a complete end frame (header, payload and, in a keyed
// cast, tag).
func EndFrame(seq uint64, e End, key *FrameKey) []byte {
	p := e.marshal()
	b := AppendFrameHeader(nil, Frame{Kind: FrameEnd, Seq: seq, Length: int64(len(p)), CRC: imaging.CRC32C(p)})
	if key == nil {
		return append(b, p...)
	}
	sent, tag := key.seal(seq, b, p)
	return append(append(b, sent...), tag...)
}

// FrameReader decodes and checks the frames of one stream. Every frame's
// header checksum, sequence number, offset and payload CRC are verified
// before Next returns it, so nothing unverified reaches a disk.
type FrameReader struct {
	r   io.Reader
	h   StreamHeader
	key *FrameKey
	// buf holds a frame whole: header, payload, tag.
	buf     []byte
	scratch []byte // for checking tags
	seq     uint64
	off     int64 // next expected offset
	done    bool
	// pos is the stream offset of the next byte read; sums, if set, has
	// the payloads' CRCs computed as they arrived (see PayloadSums).
	pos  int64
	sums *PayloadSums
}

// NewFrameReader reads the frames that follow header h from r. key is the
// cast's frame key (nil for an unkeyed cast); with it, every frame's tag is
// checked before Next returns the frame.
func NewFrameReader(r io.Reader, h StreamHeader, key *FrameKey) *FrameReader {
	return &FrameReader{r: r, h: h, key: key, buf: make([]byte, FrameHeaderLen+max(int(h.FrameSize), endPayloadLen)+h.trailerLen())}
}

// limit is where offsets end: the raw image or the stored stream (no
// limit for a stream compressed on the fly).
func (fr *FrameReader) limit() int64 {
	switch {
	case fr.h.Encoding == imaging.Raw:
		return fr.h.ImageSize
	case fr.h.StreamSize == 0:
		return math.MaxInt64
	}
	return fr.h.StreamSize
}

// A Lender lends the next n bytes of a stream where they lie, without
// copying them; they stay valid until the next Read or Lend.
type Lender interface {
	Lend(n int) ([]byte, error)
}

// body reads a frame's payload and trailer: lent in place where the reader
// can, unless the payload is to be decrypted, which happens in place.
func (fr *FrameReader) body(n int) ([]byte, error) {
	if l, ok := fr.r.(Lender); ok && n > 0 && (fr.key == nil || !fr.key.Encrypt) {
		return l.Lend(n)
	}
	b := fr.buf[FrameHeaderLen : FrameHeaderLen+n]
	_, err := io.ReadFull(fr.r, b)
	return b, err
}

// payloadCRC is the CRC-32C of f's payload p, at stream offset at: the
// sum computed as it arrived where there is one that matches f's, with
// its pieces, else computed now. A sum that does not match is not trusted
// to fail the frame: the payload itself is read.
func (fr *FrameReader) payloadCRC(p []byte, at int64, f Frame) (uint32, []uint32) {
	if fr.sums != nil {
		sum, ok := fr.sums.take(at, int64(len(p)))
		if ok && sum.crc == f.CRC {
			if sum.image != f.Offset {
				sum.pieces = nil
			}
			return sum.crc, sum.pieces
		}
		if ok {
			fr.sums.fail() // out of step with the frames: no more of them
		}
	}
	return imaging.CRC32C(p), nil
}

// ErrTruncated means the stream ended before its end frame.
var ErrTruncated = errors.New("stream ended before its end frame")

// Next returns the next verified frame. After the end frame it returns io.EOF.
func (fr *FrameReader) Next() (Frame, error) {
	if fr.done {
		return Frame{}, io.EOF
	}
	hdr := fr.buf[:FrameHeaderLen]
	if _, err := io.ReadFull(fr.r, hdr); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Frame{}, fmt.Errorf("frame %d: %w", fr.seq, ErrTruncated)
		}
		return Frame{}, fmt.Errorf("frame %d: %w", fr.seq, err)
	}
	fr.pos += FrameHeaderLen
	f, err := parseFrameHeader(hdr)
	if err != nil {
		return f, fmt.Errorf("frame %d: %w", fr.seq, err)
	}
	if f.Seq != fr.seq {
		return f, fmt.Errorf("frame %d: sequence number %d out of order", fr.seq, f.Seq)
	}
	switch f.Kind {
	case FrameData:
		if f.Length < 1 || f.Length > int64(fr.h.FrameSize) {
			return f, fmt.Errorf("frame %d: data length %d out of range (1..%d)", fr.seq, f.Length, fr.h.FrameSize)
		}
	case FrameZero:
		if fr.h.Encoding != imaging.Raw {
			return f, fmt.Errorf("frame %d: zero frame in a compressed stream", fr.seq)
		}
		if f.Length < 1 || f.CRC != 0 {
			return f, fmt.Errorf("frame %d: bad zero frame (length %d)", fr.seq, f.Length)
		}
	case FrameEnd:
		if f.Length != endPayloadLen {
			return f, fmt.Errorf("frame %d: end frame of %d bytes, want %d", fr.seq, f.Length, endPayloadLen)
		}
		if fr.off != fr.limit() && fr.limit() != math.MaxInt64 {
			return f, fmt.Errorf("frame %d: stream ends at offset %d of %d", fr.seq, fr.off, fr.limit())
		}
	default:
		return f, fmt.Errorf("frame %d: unknown kind %d", fr.seq, f.Kind)
	}
	if f.Kind != FrameEnd {
		if f.Offset != fr.off {
			return f, fmt.Errorf("frame %d: offset %d, expected %d", fr.seq, f.Offset, fr.off)
		}
		if f.Length > fr.limit()-fr.off {
			return f, fmt.Errorf("frame %d: %d bytes at offset %d run past the end (%d)", fr.seq, f.Length, f.Offset, fr.limit())
		}
	}
	n := int(payloadLen(f))
	rest := n
	if fr.key != nil {
		rest += fr.h.trailerLen()
	}
	at := fr.pos
	body, err := fr.body(rest)
	fr.pos += int64(rest)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = ErrTruncated
		}
		return f, fmt.Errorf("frame %d payload: %w", fr.seq, err)
	}
	if fr.key != nil {
		if fr.scratch, err = fr.key.open(f.Seq, hdr, body, n, fr.h.Flags&FlagSigned != 0, fr.scratch); err != nil {
			return f, fmt.Errorf("frame %d (%s, offset %d, %d bytes): tag does not verify, the frame was altered or forged: %w", fr.seq, f.Kind, f.Offset, f.Length, err)
		}
	}
	if f.Kind == FrameData || f.Kind == FrameEnd {
		p := body[:n]
		got, pieces := fr.payloadCRC(p, at, f)
		if got != f.CRC {
			return f, fmt.Errorf("frame %d (%s, offset %d, %d bytes): payload checksum mismatch (got %08x, want %08x)", fr.seq, f.Kind, f.Offset, f.Length, got, f.CRC)
		}
		f.Payload, f.pieces = p, pieces
	}
	fr.seq++
	if f.Kind == FrameEnd {
		fr.done = true
		return f, nil
	}
	fr.off += f.Length
	return f, nil
}

// ParseEnd decodes the payload of an end frame.
func ParseEnd(p []byte) (End, error) {
	var e End
	if len(p) != endPayloadLen {
		return e, fmt.Errorf("end frame: %d bytes, want %d", len(p), endPayloadLen)
	}
	copy(e.Digest[:], p[0:32])
	e.Size = int64(binary.LittleEndian.Uint64(p[32:]))
	e.Frames = binary.LittleEndian.Uint64(p[40:])
	return e, nil
}

func parseFrameHeader(b []byte) (Frame, error) {
	var f Frame
	if !bytes.Equal(b[0:4], frameMagic[:]) {
		return f, fmt.Errorf("bad frame magic %q", b[0:4])
	}
	if got, want := binary.LittleEndian.Uint32(b[36:]), imaging.CRC32C(b[:36]); got != want {
		return f, fmt.Errorf("frame header checksum mismatch")
	}
	f.Kind = FrameKind(b[4])
	f.Seq = binary.LittleEndian.Uint64(b[8:])
	f.Offset = int64(binary.LittleEndian.Uint64(b[16:]))
	f.Length = int64(binary.LittleEndian.Uint64(b[24:]))
	f.CRC = binary.LittleEndian.Uint32(b[32:])
	if f.Offset < 0 || f.Length < 0 {
		return f, fmt.Errorf("frame offset %d or length %d out of range", f.Offset, f.Length)
	}
	return f, nil
}
