package relay

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux the relay moves the stream through kernel pipes; the node's own
// copy is the one time its bytes are copied (the frame reader then reads
// them in place):
//
//	upstream ──splice──▶ in ──tee──▶ child pipe ──splice──▶ child socket (one per child)
//	                      └──read──▶ history
//
// tee(2) always copies from the head of the pipe, so a partial tee cannot be
// resumed: a child pipe must have room for a whole round. A round fills at
// most the inbound pipe's slots, and a child pipe has several times as many,
// so a child may fall a few rounds behind (its tokens say how many) before
// the relay waits for it. That slack keeps children that share a link from
// stalling each other. Should the kernel still tee short, the rest reaches
// that child from user space.

const spliceSupported = true

type rawPipe struct{ r, w int }

func newRawPipe(size int) (rawPipe, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return rawPipe{}, 0, fmt.Errorf("pipe: %w", err)
	}
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, size)
	got, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return rawPipe{}, 0, fmt.Errorf("pipe size: %w", err)
	}
	return rawPipe{r: p[0], w: p[1]}, got, nil
}

func (p rawPipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// spliceState is the relay's inbound pipe.
type spliceState struct {
	in     rawPipe
	inSize int // what one round moves at most
	wake   wakeSize
}

// inPipeSize is the inbound pipe's capacity: what one round moves at most.
// Child pipes get pipeSize, four times as much, which is the slack.
const inPipeSize = pipeSize / 4

// newSpliceState makes the inbound pipe; the relay wakes for what its
// upstream delivers in wake (0: wakeDelay).
func newSpliceState(wake time.Duration) (*spliceState, error) {
	in, size, err := newRawPipe(inPipeSize)
	if err != nil {
		return nil, err
	}
	return &spliceState{in: in, inSize: size, wake: wakeSize{delay: wake}}, nil
}

func (s *spliceState) close() { s.in.close() }

// childPipe makes a child's pipe; if the kernel grants less than the slack
// needs (a user's pipe quota), the inbound pipe shrinks to match.
func (s *spliceState) childPipe() (rawPipe, error) {
	p, size, err := newRawPipe(pipeSize)
	if err != nil {
		return rawPipe{}, err
	}
	if want := size / (childSlack + 1); want < s.inSize {
		if got, err := unix.FcntlInt(uintptr(s.in.w), unix.F_SETPIPE_SZ, want); err == nil {
			s.inSize = got
		}
	}
	return p, nil
}

// spliceRound moves what the upstream has, up to a round, into the inbound
// pipe. io.EOF means the upstream closed.
func (r *Relay) spliceRound(up Upstream) (int, error) {
	rc, err := up.SyscallConn()
	if err != nil {
		return 0, err
	}
	// Wake for a batch, not for every few packets, but for no more than
	// the link carries in a few milliseconds (wakeSize). A pipe (the
	// source's) has no such option; setting it fails harmlessly.
	if size, ok := r.sp.wake.next(up, r.sp.inSize, time.Now()); ok {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, size) })
	}
	// An upstream that pauses short of the batch would hold its last
	// bytes here until it sends more: past flushAfter, take any byte.
	// Setting the option wakes the poller if bytes are waiting. The flag
	// is set after it, so that a round that sees the flag sets its batch
	// after this: one that fires late never leaves the socket at one byte.
	flush := time.AfterFunc(r.sp.wake.flushAfter(), func() {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
		r.sp.wake.flush()
	})
	n, err := spliceIn(rc, r.sp.in.w, r.sp.inSize)
	flush.Stop()
	if err == nil && n == 0 {
		err = errEOF
	}
	r.sp.wake.moved(n)
	return n, err
}

var errEOF = errors.New("upstream closed")

// distributeSplice tees the round to every child and reads it into the
// history.
func (r *Relay) distributeSplice(n int) error {
	var short []*relayChild
	teed := make([]int, len(r.children))
	for i, ch := range r.children {
		ch.takeToken()
		want := n
		if r.teeLimit > 0 {
			want = min(n, r.teeLimit)
		}
		m, _ := teeAll(r.sp.in.r, ch.pipe.w, want)
		teed[i] = m
		if m < n {
			short = append(short, ch)
		}
	}
	var data []byte
	if len(short) > 0 {
		// Take the round out of the kernel once, to finish the short
		// children and the local copy from user space.
		data = make([]byte, n) // the short children keep it past this round
		if err := readAll(r.sp.in.r, data); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	}
	for i, ch := range r.children {
		j := childJob{n: teed[i]}
		if teed[i] < n {
			j.extra = data[teed[i]:]
		}
		if ch.skip > 0 {
			k := min(ch.skip, int64(n))
			ch.skip -= k
			j.skip = int(k)
		}
		ch.jobs <- j
	}
	if data != nil {
		if err := r.hist.write(data); err != nil {
			return fmt.Errorf("relay: local copy: %w", err)
		}
		return nil
	}
	// The round, teed to every child, is still in the inbound pipe: read
	// it straight into the history, the node's one copy of it.
	for n > 0 {
		k, err := r.hist.put(n, func(p []byte) (int, error) { return unix.Read(r.sp.in.r, p) })
		if err != nil {
			return fmt.Errorf("relay: local copy: %w", err)
		}
		if k == 0 {
			return errors.New("relay: local copy: inbound pipe ended early")
		}
		n -= k
	}
	return nil
}

// sendSplice sends a round from the child's pipe: first the bytes it
// already has are discarded, then the rest goes to its socket.
func (r *Relay) sendSplice(ch *relayChild, j childJob) error {
	rc, err := ch.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	skip := j.skip
	fromPipe := j.n
	if skip > 0 {
		k := min(skip, fromPipe)
		if err := discardPipe(ch.pipe.r, k); err != nil {
			return err
		}
		skip -= k
		fromPipe -= k
	}
	if ch.spool != nil {
		return spliceToSpool(ch.spool, ch.pipe.r, fromPipe, j.extra[min(skip, len(j.extra)):])
	}
	if err := spliceOut(rc, ch.pipe.r, fromPipe); err != nil {
		return err
	}
	if len(j.extra) > skip {
		_, err = ch.conn.Write(j.extra[skip:])
	}
	return err
}

// spliceToSpool moves exactly n bytes from a pipe to the end of a paced
// child's spool, then appends extra.
func spliceToSpool(s *spool, pipeR, n int, extra []byte) error {
	if err := s.room(n); err != nil {
		return err
	}
	fd := int(s.w.Fd())
	for n > 0 {
		k, err := unix.Splice(pipeR, nil, fd, nil, n, unix.SPLICE_F_MOVE)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		if k == 0 {
			return errors.New("spool: splice made no progress")
		}
		s.wrote(k)
		n -= int(k)
	}
	if len(extra) > 0 {
		_, err := s.Write(extra)
		return err
	}
	return nil
}

// freeSpace is the room left on f's file system, 0 if unknown.
func freeSpace(f *os.File) int64 {
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// punchHole gives the file system back the room of f's first n bytes.
func punchHole(f *os.File, n int64) {
	unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, n)
}

// spliceIn moves up to max bytes from a socket or pipe into an empty pipe,
// waiting for data. It returns 0 at end of stream.
func spliceIn(rc syscall.RawConn, pipeW, max int) (int, error) {
	var n int64
	var serr error
	err := rc.Read(func(fd uintptr) bool {
		n, serr = unix.Splice(int(fd), nil, pipeW, nil, max, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	return int(n), serr
}

// spliceOut moves exactly n bytes from a pipe to a socket.
func spliceOut(rc syscall.RawConn, pipeR, n int) error {
	for n > 0 {
		var k int64
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			k, serr = unix.Splice(pipeR, nil, int(fd), nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return !errors.Is(serr, unix.EAGAIN)
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		if k == 0 {
			return errors.New("splice to socket made no progress")
		}
		n -= int(k)
	}
	return nil
}

// moveOut moves exactly n bytes from a pipe into a poller-managed pipe,
// waiting while it is full.
func moveOut(rc syscall.RawConn, pipeR, n int) error {
	for n > 0 {
		var k int64
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			k, serr = unix.Splice(pipeR, nil, int(fd), nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return !errors.Is(serr, unix.EAGAIN)
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		n -= int(k)
	}
	return nil
}

// teeAll duplicates the first n bytes of src into dst and returns how many
// it could.
func teeAll(src, dst, n int) (int, error) {
	k, err := unix.Tee(src, dst, n, unix.SPLICE_F_NONBLOCK)
	if err != nil {
		return 0, err
	}
	return int(k), nil
}

// readAll reads exactly len(p) bytes that are already in a pipe.
func readAll(fd int, p []byte) error {
	for len(p) > 0 {
		k, err := unix.Read(fd, p)
		if err != nil {
			return err
		}
		if k == 0 {
			return errors.New("pipe ended early")
		}
		p = p[k:]
	}
	return nil
}

// discardPipe throws away exactly n bytes that are in a pipe.
func discardPipe(fd, n int) error {
	var buf [64 << 10]byte
	for n > 0 {
		k, err := unix.Read(fd, buf[:min(n, len(buf))])
		if err != nil {
			return err
		}
		if k == 0 {
			return errors.New("pipe ended early")
		}
		n -= k
	}
	return nil
}

// drain discards whatever a pipe holds.
func drain(fd int) {
	var buf [64 << 10]byte
	for {
		k, err := unix.Read(fd, buf[:])
		if k <= 0 || err != nil {
			return
		}
	}
}

// Discard splices everything from c into /dev/null through a pipe, the
// way a relay receives: the probe times it to learn what a stream costs.
func Discard(c *net.TCPConn) error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	p, size, err := newRawPipe(pipeSize)
	if err != nil {
		return err
	}
	defer p.close()
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	nullRC, err := null.SyscallConn()
	if err != nil {
		return err
	}
	for {
		n, err := spliceIn(rc, p.w, size)
		if err != nil || n == 0 {
			return err
		}
		if err := moveOut(nullRC, p.r, n); err != nil {
			return err
		}
	}
}
