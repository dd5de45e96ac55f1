package dolly

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// A data connection opens with a handshake: the upstream sends the stream
// header, the child answers with its position (the stream bytes it already
// has, 0 for a fresh start), and the upstream streams on from there. So a
// child that lost its upstream resumes from the byte it had reached, from
// whichever node (or the source) it is given next.

// handshakeTimeout bounds each side's wait for the other's half.
const handshakeTimeout = 30 * time.Second

// OpenStream sends the header on c, an upstream's new connection to a
// child, and returns the position the child answered.
func OpenStream(c net.Conn, h StreamHeader) (int64, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(h.MarshalBinary()); err != nil {
		return 0, fmt.Errorf("sending the stream header: %w", err)
	}
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("reading the child's position: %w", err)
	}
	pos := int64(binary.LittleEndian.Uint64(b[:]))
	if pos < 0 {
		return 0, fmt.Errorf("child's position %d out of range", pos)
	}
	return pos, nil
}

// readHeader reads the header an upstream opens a data connection with.
func readHeader(c net.Conn) (StreamHeader, error) {
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, StreamHeaderLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return StreamHeader{}, err
	}
	return ParseStreamHeader(b)
}

// writePosition answers a header with the position to stream from.
func writePosition(c net.Conn, pos int64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(pos))
	c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetWriteDeadline(time.Time{})
	_, err := c.Write(b[:])
	return err
}
