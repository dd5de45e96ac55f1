package relay

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// A paced child is served at its own pace: the relay writes its share of
// each round into a spool file, which never makes the relay wait, and a
// sender moves the spool to the child's socket as fast as the child takes
// it. One slow child (a bad cable, an old disk) then never holds back the
// others. The spool holds only what the child has not taken yet: what it
// has is punched out of the file behind the sender.
type spool struct {
	w    *os.File // the relay's side: rounds are appended here
	r    *os.File // the sender's side: its own offset, read with sendfile
	conn net.Conn

	// limit bounds what the child may have yet to take: half the room
	// the spool's file system had when it was made (RAM, in the netboot
	// image), so that the node and the others' spools keep theirs.
	limit int64

	mu     sync.Mutex
	cond   *sync.Cond
	end    int64 // bytes written
	sent   int64 // bytes sent to the child
	closed bool  // nothing more will be written
	err    error // the sender's, once it failed

	sentAll chan struct{} // closed when the sender returns
}

// punchEvery is how many sent bytes the spool lets pile up before it gives
// their room back to the file system.
const punchEvery = 8 << 20

// newSpool makes a spool in dir (the system's temporary directory if
// empty), holding at most limit bytes the child has yet to take (0: half
// the room on dir's file system), and starts sending it to c.
func newSpool(dir string, limit int64, c net.Conn) (*spool, error) {
	w, err := os.CreateTemp(dir, ".dolly-spool-*")
	if err != nil {
		return nil, fmt.Errorf("spool for a paced child: %w", err)
	}
	r, err := os.Open(w.Name())
	os.Remove(w.Name()) // it lives as long as its two handles
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("spool for a paced child: %w", err)
	}
	if limit <= 0 {
		limit = freeSpace(w) / 2
	}
	s := &spool{w: w, r: r, conn: c, sentAll: make(chan struct{}), limit: limit}
	s.cond = sync.NewCond(&s.mu)
	go s.send()
	return s, nil
}

// room reports an error if n more bytes would take the child's backlog
// past the spool's limit.
func (s *spool) room(n int) error {
	if s.limit <= 0 {
		return nil
	}
	if b := s.backlog() + int64(n); b > s.limit {
		return fmt.Errorf("spool full: the child lags %d bytes behind, this node keeps at most %d for it", b, s.limit)
	}
	return nil
}

// Write appends p for the child.
func (s *spool) Write(p []byte) (int, error) {
	if err := s.room(len(p)); err != nil {
		return 0, err
	}
	n, err := s.w.Write(p)
	s.wrote(int64(n))
	if err != nil {
		return n, fmt.Errorf("spool: %w", err)
	}
	return n, nil
}

// wrote tells the sender n more bytes are in the file.
func (s *spool) wrote(n int64) {
	s.mu.Lock()
	s.end += n
	s.cond.Broadcast()
	s.mu.Unlock()
}

// failed returns the sender's error, if it failed.
func (s *spool) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// send moves the spool to the child until everything written was sent
// after close, or the child's connection fails.
func (s *spool) send() {
	defer close(s.sentAll)
	punched := int64(0)
	for {
		s.mu.Lock()
		for s.sent == s.end && !s.closed {
			s.cond.Wait()
		}
		from, to, closed := s.sent, s.end, s.closed
		s.mu.Unlock()
		if from == to && closed {
			return
		}
		// Within a LimitedReader the file goes out with sendfile(2).
		n, err := io.Copy(s.conn, &io.LimitedReader{R: s.r, N: to - from})
		if err == nil && n < to-from {
			err = io.ErrUnexpectedEOF
		}
		s.mu.Lock()
		s.sent += n
		if err != nil {
			s.err = err
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if err != nil {
			return
		}
		if s.sent-punched >= punchEvery {
			punched = s.sent / punchEvery * punchEvery
			punchHole(s.w, punched)
		}
	}
}

// close says nothing more will be written.
func (s *spool) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// wait waits until the sender has sent everything written (after close)
// or failed.
func (s *spool) wait() error {
	<-s.sentAll
	return s.failed()
}

// release closes the spool's file; the sender must have returned, or the
// child's connection been closed.
func (s *spool) release() {
	s.close()
	<-s.sentAll
	s.w.Close()
	s.r.Close()
}

// backlog is how many bytes the child has yet to take.
func (s *spool) backlog() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end - s.sent
}
