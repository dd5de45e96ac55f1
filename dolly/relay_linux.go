package dolly

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The splice relay moves the stream through kernel pipes only:
//
//	upstream socket ──splice──▶ in ──tee──▶ child pipe ──splice──▶ child socket (one per child)
//	                             └──splice (move)──▶ local pipe ──read──▶ node
//
// tee(2) always copies from the head of the pipe, so a partial tee cannot be
// resumed: a child pipe must have room for a whole round. A round fills at
// most the inbound pipe's slots, and a child pipe has several times as many,
// so a child may fall a few rounds behind (its tokens say how many) before
// the relay waits for it. That slack keeps children that share a link from
// stalling each other. Should the kernel still tee short, the rest reaches
// that child from user space.

func canSplice(up net.Conn, children []net.Conn) bool {
	if _, ok := up.(*net.TCPConn); !ok {
		return false
	}
	for _, c := range children {
		if _, ok := c.(*net.TCPConn); !ok {
			return false
		}
	}
	return true
}

func setPipeSize(f *os.File, size int) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, size) })
	}
}

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

// childJob is one round for a child: n bytes waiting in its pipe, then
// extra bytes from user space after a short tee.
type childJob struct {
	n     int
	extra []byte
}

type spliceChild struct {
	conn *net.TCPConn
	rc   syscall.RawConn
	pipe rawPipe
	jobs chan childJob
	// tokens holds one token per round the child may have queued; the
	// relay takes one to tee, the child returns it when the round is sent.
	tokens chan struct{}
	slack  int
	dead   atomic.Bool // set by the child goroutine once its socket fails
}

// inPipeSize is the inbound pipe's capacity: what one round moves at most.
// Child pipes get pipeSize, four times as much.
const inPipeSize = pipeSize / 4

func (r *Relay) runSplice() (err error) {
	in, inSize, err := newRawPipe(inPipeSize)
	if err != nil {
		return err
	}
	defer in.close()
	upRC, err := r.up.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	localRC, err := r.localW.SyscallConn()
	if err != nil {
		return err
	}

	children := make([]*spliceChild, 0, len(r.children))
	defer func() {
		if len(children) < len(r.children) { // set-up failed part way
			for _, ch := range children {
				ch.pipe.close()
			}
		}
	}()
	smallest := pipeSize
	for _, c := range r.children {
		p, size, err := newRawPipe(pipeSize)
		if err != nil {
			return err
		}
		tc := c.(*net.TCPConn)
		rc, err := tc.SyscallConn()
		if err != nil {
			p.close()
			return err
		}
		smallest = min(smallest, size)
		children = append(children, &spliceChild{conn: tc, rc: rc, pipe: p})
	}
	if smallest < inSize {
		// Child pipes smaller than the inbound pipe (a user's pipe quota
		// reached) could make tee short: shrink the inbound pipe to match.
		if got, err := unix.FcntlInt(uintptr(in.w), unix.F_SETPIPE_SZ, smallest); err == nil {
			inSize = got
		}
	}
	slack := max(smallest/inSize-1, 1)
	for _, ch := range children {
		ch.slack = slack
		ch.jobs = make(chan childJob, slack)
		ch.tokens = make(chan struct{}, slack)
		for range slack {
			ch.tokens <- struct{}{}
		}
	}
	done := make(chan struct{})
	for i, ch := range children {
		go r.runChild(i, ch, done)
	}
	defer func() {
		if err != nil {
			// A child blocked on a full socket must not hold up the exit.
			for _, ch := range children {
				ch.conn.Close()
			}
		}
		for _, ch := range children {
			close(ch.jobs)
		}
		for range children {
			<-done
		}
		for _, ch := range children {
			ch.pipe.close()
		}
	}()

	for {
		n, err := spliceIn(upRC, in.w, inSize)
		if err != nil {
			return fmt.Errorf("receiving from upstream: %w", err)
		}
		if n == 0 {
			for _, ch := range children {
				for range ch.slack { // every round sent before the defer closes
					<-ch.tokens
				}
			}
			return nil
		}
		var short []int // children that got only part of the round
		teed := make([]int, len(children))
		for i, ch := range children {
			<-ch.tokens
			if ch.dead.Load() {
				ch.tokens <- struct{}{}
				teed[i] = -1
				continue
			}
			want := n
			if r.teeLimit > 0 {
				want = min(n, r.teeLimit)
			}
			m, _ := teeAll(in.r, ch.pipe.w, want)
			teed[i] = m
			if m < n {
				short = append(short, i)
			}
		}
		var data []byte
		if len(short) > 0 {
			// Take the round out of the kernel once, to finish the short
			// children and the local copy from user space.
			data = make([]byte, n) // the short children keep it past this round
			if err := readAll(in.r, data); err != nil {
				return fmt.Errorf("relay: %w", err)
			}
		}
		for i, ch := range children {
			switch {
			case teed[i] < 0:
			case teed[i] < n:
				ch.jobs <- childJob{n: teed[i], extra: data[teed[i]:]}
			default:
				ch.jobs <- childJob{n: n}
			}
		}
		r.forwarded.Add(int64(n))
		if data != nil {
			if _, err := r.localW.Write(data); err != nil {
				return fmt.Errorf("relay: local copy: %w", err)
			}
			continue
		}
		if err := moveOut(localRC, in.r, n); err != nil {
			return fmt.Errorf("relay: local copy: %w", err)
		}
	}
}

// runChild sends each round from the child's pipe to its socket.
func (r *Relay) runChild(i int, ch *spliceChild, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	for job := range ch.jobs {
		if !ch.dead.Load() {
			err := spliceOut(ch.rc, ch.pipe.r, job.n)
			if err == nil && len(job.extra) > 0 {
				_, err = ch.conn.Write(job.extra)
			}
			if err != nil {
				r.setChildErr(i, fmt.Errorf("sending to child: %w", err))
				ch.dead.Store(true)
			}
		}
		if ch.dead.Load() {
			drain(ch.pipe.r)
		}
		ch.tokens <- struct{}{}
	}
}

// spliceIn moves up to max bytes from a socket into an empty pipe, waiting
// for data. It returns 0 at end of stream.
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

// teeAll duplicates the first n bytes of src into the empty pipe dst and
// returns how many it could.
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
