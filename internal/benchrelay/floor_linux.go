package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// floorRelay is the least a relay can do in user space on Linux: splice
// what it receives into a pipe, tee it to the next host and splice it into
// the target, never touching the bytes. No checks, no history, no copy for
// itself; but splice writes a block device through the page cache, which
// costs a copy and the write-back that a node's direct writes do not.
func floorRelay(listen, next, target string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	up, err := ln.Accept()
	ln.Close()
	if err != nil {
		return err
	}
	down, err := net.Dial("tcp", next)
	if err != nil {
		return err
	}
	tg, err := os.Create(target)
	if err != nil {
		return err
	}
	defer tg.Close()
	// Blocking copies of the descriptors keep the loop plain.
	upF, err := up.(*net.TCPConn).File()
	if err != nil {
		return err
	}
	downF, err := down.(*net.TCPConn).File()
	if err != nil {
		return err
	}
	in, out, t := int(upF.Fd()), int(downF.Fd()), int(tg.Fd())
	const round = 256 << 10
	a, err := floorPipe(round)
	if err != nil {
		return err
	}
	b, err := floorPipe(4 * round)
	if err != nil {
		return err
	}
	for {
		n, err := unix.Splice(in, nil, a[1], nil, round, unix.SPLICE_F_MOVE)
		if err != nil {
			return fmt.Errorf("splice in: %w", err)
		}
		if n == 0 {
			break
		}
		k, err := unix.Tee(a[0], b[1], int(n), 0)
		if err != nil || k != n {
			return fmt.Errorf("tee: %d of %d: %v", k, n, err)
		}
		if err := spliceAll(b[0], out, n); err != nil {
			return fmt.Errorf("splice out: %w", err)
		}
		if err := spliceAll(a[0], t, n); err != nil {
			return fmt.Errorf("splice to target: %w", err)
		}
	}
	if err := unix.Shutdown(out, unix.SHUT_WR); err != nil {
		return err
	}
	// Wait for the sink to close: everything was delivered.
	if _, err := downF.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func floorPipe(size int) ([2]int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return p, err
	}
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, size)
	return p, nil
}

func spliceAll(from, to int, n int64) error {
	for n > 0 {
		k, err := unix.Splice(from, nil, to, nil, int(n), unix.SPLICE_F_MOVE)
		if err != nil {
			return err
		}
		if k == 0 {
			return errors.New("splice made no progress")
		}
		n -= k
	}
	return nil
}
