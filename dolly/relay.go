package dolly

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// Relay forwards a node's upstream stream verbatim to its children and
// hands the node its own copy through Local. On Linux it moves the bytes
// with splice(2) and tee(2), so forwarding costs no user-space copy; else
// (and for connections that are not TCP) it copies.
type Relay struct {
	// Local is the read end of the node's own copy of the stream. The node
	// must keep reading it to EOF, or the relay (and everyone downstream)
	// stalls.
	Local *os.File

	up       net.Conn
	children []net.Conn
	localW   *os.File

	forwarded atomic.Int64
	mu        sync.Mutex
	childErr  []error
	zeroCopy  bool
	// teeLimit, when set, caps each tee so tests can exercise the
	// short-tee path that the kernel takes only rarely.
	teeLimit int
}

// pipeSize is the capacity asked of every pipe: one splice moves at most
// this much, and it bounds how far a relay reads ahead of its slowest child.
const pipeSize = 1 << 20

// NewRelay prepares a relay from up to children.
func NewRelay(up net.Conn, children []net.Conn) (*Relay, error) {
	lr, lw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	setPipeSize(lw, pipeSize)
	r := &Relay{Local: lr, up: up, children: children, localW: lw, childErr: make([]error, len(children))}
	r.zeroCopy = canSplice(up, children)
	return r, nil
}

// ZeroCopy reports whether the relay forwards without user-space copies.
func (r *Relay) ZeroCopy() bool { return r.zeroCopy }

// Forwarded is the number of bytes handed to all children so far (counted
// once per byte, not per child).
func (r *Relay) Forwarded() int64 { return r.forwarded.Load() }

// ChildErr returns the error that cut child i off, or nil.
func (r *Relay) ChildErr(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.childErr[i]
}

func (r *Relay) setChildErr(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.childErr[i] == nil {
		r.childErr[i] = err
	}
}

// Run relays until upstream ends. A child that fails is cut off and the
// relay goes on with the others and the local copy; ChildErr tells which.
// Run closes the write end of Local and half-closes the children's
// connections when upstream ends cleanly, and closes them on error.
func (r *Relay) Run() error {
	var err error
	if r.zeroCopy {
		err = r.runSplice()
	} else {
		err = r.runCopy()
	}
	r.localW.Close()
	for i, c := range r.children {
		if err == nil && r.ChildErr(i) == nil {
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				if cerr := cw.CloseWrite(); cerr != nil {
					r.setChildErr(i, cerr)
				}
				continue
			}
		}
		c.Close()
	}
	return err
}

// runCopy is the portable relay: read a buffer, write it everywhere.
func (r *Relay) runCopy() error {
	buf := make([]byte, 256<<10)
	localOK := true
	for {
		n, err := r.up.Read(buf)
		if n > 0 {
			for i, c := range r.children {
				if r.ChildErr(i) != nil {
					continue
				}
				if _, werr := c.Write(buf[:n]); werr != nil {
					r.setChildErr(i, werr)
				}
			}
			r.forwarded.Add(int64(n))
			if localOK {
				if _, werr := r.localW.Write(buf[:n]); werr != nil {
					localOK = false // the node stopped reading; keep forwarding
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receiving from upstream: %w", err)
		}
	}
}
