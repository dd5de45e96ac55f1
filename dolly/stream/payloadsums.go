package stream

import (
	"sync"

	"dolly/imaging"
)

// PayloadSums computes the CRC-32C of every frame's payload as the
// stream's bytes arrive (Observe, on a relay's goroutine), while they are
// still in the CPU's cache, and hands the sums to the frame reader, which
// then checks a payload without reading it again.
//
// On a relay node a payload reaches the frame reader well after it
// arrived: a frame is a megabyte, received in rounds of a quarter, and in
// between the node's other work, and other nodes of a shared machine,
// push it out of the cache. Read again there, the check of the demo's 24
// nodes on 2 cores took 15% of the machine.
//
// A PayloadSums only ever spares work: a payload it has no sum for, or
// whose sum does not match, the reader checks itself.
type PayloadSums struct {
	mu      sync.Mutex
	started bool
	broken  bool         // the bytes stopped making sense as frames
	sums    []payloadSum // done, oldest first

	// The parse, owned by Observe's goroutine once started.
	trailer  int64 // bytes after each frame's payload (a tag)
	maxBody  int64 // the longest payload a frame may carry
	pos      int64 // stream offset of the next byte
	hdr      [FrameHeaderLen]byte
	hdrFill  int
	raw      bool  // a raw stream: data payloads are split for the digest
	payload  int64 // payload bytes still to come
	skip     int64 // trailer bytes still to come
	piece    int64 // bytes of the payload's piece still to come
	pieceLen int64 // the piece's length
	pieceCRC uint32
	sum      payloadSum
	last     bool // the frame is the end frame
	finished bool // the end frame has passed
}

// payloadSum is the CRC-32C of the n payload bytes at stream offset off.
// A raw stream's data payload is image bytes from image offset image on:
// pieces are then the CRCs of its parts split where the image's digest
// blocks end (imaging.DigestBlock), which the digest takes without
// reading the payload again.
type payloadSum struct {
	off, n int64
	crc    uint32
	image  int64
	pieces []uint32
}

// maxPendingSums bounds the sums kept for a reader that has fallen behind
// (or stopped reading: a failed target): past it the oldest are dropped,
// and the reader checks those payloads itself.
const maxPendingSums = 4096

// NewPayloadSums returns sums for a stream whose header is not known yet:
// Start must come before the first byte.
func NewPayloadSums() *PayloadSums { return &PayloadSums{} }

// Start readies s for the frames that follow header h, read with key (nil
// for an unkeyed cast). An encrypted stream's CRCs are of the decrypted
// payloads, which pass here encrypted: s then computes none.
func (s *PayloadSums) Start(h StreamHeader, key *FrameKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	s.broken = key != nil && key.Encrypt
	if key != nil {
		s.trailer = int64(h.trailerLen())
	}
	s.maxBody = int64(max(int(h.FrameSize), endPayloadLen))
	s.raw = h.Encoding == imaging.Raw
}

// Observe takes the stream's next bytes, in order, from offset 0 (the
// byte after the stream header).
func (s *PayloadSums) Observe(p []byte) {
	if s.finished || s.failed() {
		return
	}
	for len(p) > 0 && !s.finished {
		var k int
		switch {
		case s.payload > 0:
			k = int(min(int64(len(p)), s.piece))
			s.pieceCRC = imaging.CRC32CUpdate(s.pieceCRC, p[:k])
			s.payload -= int64(k)
			if s.piece -= int64(k); s.piece == 0 {
				s.endPiece()
			}
		case s.skip > 0:
			k = int(min(int64(len(p)), s.skip))
			s.skip -= int64(k)
		default:
			k = copy(s.hdr[s.hdrFill:], p)
			if s.hdrFill += k; s.hdrFill == len(s.hdr) && !s.nextFrame(s.pos+int64(k)) {
				s.fail()
				return
			}
		}
		s.pos += int64(k)
		p = p[k:]
		s.finished = s.last && s.payload == 0 && s.skip == 0
	}
}

// nextFrame starts on the frame whose header is complete, its body at
// stream offset body; false if the header is not one.
func (s *PayloadSums) nextFrame(body int64) bool {
	s.hdrFill = 0
	f, err := parseFrameHeader(s.hdr[:])
	if err != nil {
		return false
	}
	n := payloadLen(f)
	if n > s.maxBody {
		return false
	}
	s.payload, s.skip = n, s.trailer
	s.sum = payloadSum{off: body, n: n}
	if s.raw && f.Kind == FrameData {
		s.sum.image = f.Offset
		s.sum.pieces = []uint32{}
	}
	s.startPiece()
	s.last = f.Kind == FrameEnd
	return true
}

// startPiece starts on the next piece of the payload: up to the end of
// the image's digest block where payloads are split, else all of it.
func (s *PayloadSums) startPiece() {
	s.piece, s.pieceCRC = s.payload, 0
	if s.sum.pieces != nil {
		at := s.sum.image + s.sum.n - s.payload
		s.piece = min(s.payload, imaging.DigestBlock-at%imaging.DigestBlock)
	}
	s.pieceLen = s.piece
}

// endPiece adds the piece just summed to the payload's sum, and hands the
// sum on once the payload is whole.
func (s *PayloadSums) endPiece() {
	if s.sum.pieces != nil {
		s.sum.pieces = append(s.sum.pieces, s.pieceCRC)
	}
	s.sum.crc = imaging.CRC32CCombine(s.sum.crc, s.pieceCRC, s.pieceLen)
	if s.payload > 0 {
		s.startPiece()
		return
	}
	s.done(s.sum)
}

// payloadLen is the bytes of payload that follow f's header.
func payloadLen(f Frame) int64 {
	if f.Kind == FrameData || f.Kind == FrameEnd {
		return f.Length
	}
	return 0
}

func (s *PayloadSums) done(sum payloadSum) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sums) >= maxPendingSums {
		s.sums = s.sums[1:]
	}
	s.sums = append(s.sums, sum)
}

func (s *PayloadSums) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.started || s.broken
}

func (s *PayloadSums) fail() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broken, s.sums = true, nil
}

// take returns the sum of the n payload bytes at stream offset off, if s
// has it, and forgets every sum before it.
func (s *PayloadSums) take(off, n int64) (payloadSum, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.sums) > 0 && s.sums[0].off < off {
		s.sums = s.sums[1:]
	}
	if len(s.sums) == 0 || s.sums[0].off != off || s.sums[0].n != n {
		return payloadSum{}, false
	}
	sum := s.sums[0]
	s.sums = s.sums[1:]
	return sum, true
}
