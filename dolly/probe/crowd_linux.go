package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"dolly/dolly/relay"
	"dolly/imaging"
)

// relayPipe is relayCost's pipeline: a sender writing to dolly's relay,
// which forwards to a child that splices it away and hands its own copy to
// a reader that checks it.
type relayPipe struct {
	relay  *relay.Relay
	sender *net.TCPConn
	done   []<-chan error
	close  func()

	mu       sync.Mutex
	read     int64 // bytes the reader has checked
	readMore *sync.Cond
	ended    bool // the reader stopped
}

// waitRead waits until the reader has checked n bytes, and says whether it
// did before it stopped.
func (p *relayPipe) waitRead(n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.read < n && !p.ended {
		p.readMore.Wait()
	}
	return p.read >= n
}

// startRelayPipe sets a relayPipe up; close releases it, whatever ran.
// history is the relay's history (nil: one of the cast's size).
func startRelayPipe(ctx context.Context, history []byte) (p *relayPipe, err error) {
	ctx, cancel := context.WithCancel(ctx)
	p = &relayPipe{}
	p.readMore = sync.NewCond(&p.mu)
	var closers []io.Closer
	// stopped is closed once the relay's Run has returned: close waits
	// for it, since the history may be the cast's (Config.RelayHistory),
	// which no stopping relay may write once the cast has it.
	// readStopped is closed once the reader has stopped: it may still copy
	// out what the history holds after the relay has stopped.
	var stopped, readStopped chan struct{}
	p.close = func() {
		cancel()
		for _, c := range closers {
			c.Close()
		}
		if stopped != nil {
			<-stopped
		}
		if readStopped != nil {
			<-readStopped
		}
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("no loopback: %w", err)
	}
	closers = append(closers, up)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	closers = append(closers, down)
	p.relay, err = relay.New(relay.Config{History: history})
	if err != nil {
		return nil, err
	}
	ran := make(chan error, 1)
	stopped = make(chan struct{})
	go func() {
		ran <- p.relay.Run(ctx)
		close(stopped)
	}()
	sank := discardOne(down)
	child, err := net.Dial("tcp", down.Addr().String())
	if err != nil {
		return nil, err
	}
	if err := p.relay.Attach(ctx, "probe", child, 0); err != nil {
		child.Close()
		return nil, err
	}
	sender, err := net.Dial("tcp", up.Addr().String())
	if err != nil {
		return nil, err
	}
	closers = append(closers, sender)
	p.sender = sender.(*net.TCPConn)
	in, err := up.Accept()
	if err != nil {
		return nil, err
	}
	if _, err := p.relay.SetUpstream(ctx, in.(*net.TCPConn)); err != nil {
		in.Close()
		return nil, err
	}
	read := make(chan error, 1)
	readStopped = make(chan struct{})
	go func() {
		defer close(readStopped)
		b := make([]byte, 1<<20)
		for {
			n, err := p.relay.Reader().Read(b)
			imaging.CRC32C(b[:n])
			p.mu.Lock()
			p.read += int64(n)
			p.ended = err != nil
			p.readMore.Broadcast()
			p.mu.Unlock()
			if err != nil {
				read <- nil
				return
			}
		}
	}()
	p.done = []<-chan error{ran, sank, read}
	return p, nil
}

// crowdWarm is a crowd pipeline's warm-up.
const crowdWarm = 4 << 20

// A Crowd is this node's data path (see relayCost), set up and warmed,
// ready to push bytes when told. Every node of a machine pushes the same
// bytes at once: all their bytes over the time the last one took is what
// the machine does in a crowd, whatever they cost each other, which no lone
// probe sees.
type Crowd struct {
	pipe *relayPipe
	buf  []byte
}

// startCrowd sets a relayPipe up and warms it: its history touched, its
// socket buffers grown, as a cast's are after its first megabytes.
func startCrowd(ctx context.Context, buf, history []byte) (*Crowd, error) {
	p, err := startRelayPipe(ctx, history)
	if err != nil {
		return nil, err
	}
	c := &Crowd{pipe: p, buf: buf}
	// The relay wakes for whole rounds (a quarter MiB), so the last of
	// what is sent waits for more: the warm-up is taken as done a round
	// short.
	if err := writeN(p.sender, buf, crowdWarm); err != nil {
		c.Close()
		return nil, err
	}
	if !p.waitRead(crowdWarm - 1<<20) {
		c.Close()
		return nil, errors.New("the data path stopped while warming up")
	}
	return c, nil
}

// PushFor pushes bytes through the data path without a pause, and counts
// what reaches its reader over window, from settle on: the time the
// other nodes of the machine take to start pushing too. It returns the
// bytes counted and the time they took. The pipeline is spent after it.
func (c *Crowd) PushFor(settle, window time.Duration) (int64, time.Duration, error) {
	p := c.pipe
	pushed := make(chan error, 1)
	go func() {
		for {
			if _, err := p.sender.Write(c.buf); err != nil {
				pushed <- err
				return
			}
		}
	}()
	stop := func() error {
		p.sender.Close() // ends the writer; the other ends go with Close
		return <-pushed
	}
	count := func() (int64, bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.read, p.ended
	}
	time.Sleep(settle)
	r0, ended := count()
	t0 := time.Now()
	if !ended {
		time.Sleep(window)
	}
	r1, ended := count()
	took := time.Since(t0)
	if ended {
		return 0, 0, fmt.Errorf("the data path stopped: %w", stop())
	}
	stop()
	return r1 - r0, took, nil
}

// Close ends the pipeline whole: nothing of it outlives the measurement.
func (c *Crowd) Close() {
	c.pipe.close()
	for _, done := range c.pipe.done {
		<-done
	}
}

// writeN writes n bytes of buf, repeated, to c.
func writeN(c net.Conn, buf []byte, n int64) error {
	for n > 0 {
		k, err := c.Write(buf[:min(int64(len(buf)), n)])
		if err != nil {
			return err
		}
		n -= int64(k)
	}
	return nil
}
