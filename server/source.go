package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"dolly/dolly/dial"
	"dolly/dolly/relay"
	"dolly/dolly/stream"
	"dolly/imaging"
)

// source is the root of the cast: an encoder writing the stream into a
// pipe, and a relay forwarding that pipe to the source's children exactly
// as a node forwards its upstream. So the source serves children that join
// late or lose their upstream from its history, like any node.
type source struct {
	*feed  // the stream every child gets unless the history cannot serve it
	s      *Server
	header stream.StreamHeader
	skip   int64 // stream bytes every child had already
	digest chan imaging.Digest

	// extra streams serve children the main stream's history cannot:
	// each its own encoder from the start of the image.
	mu     sync.Mutex
	extras []*feed
}

// feed is one stream of the image: an encoder writing into a pipe that a
// relay reads and forwards to its children. The relay runs from the
// feed's making until its stream is delivered or its context ends.
type feed struct {
	enc    *stream.Encoder
	relay  *relay.Relay
	pr, pw *os.File     // the relay reads pr, the encoder writes pw
	sent   atomic.Int64 // stream bytes encoded (once, not per child)
	ended  atomic.Bool  // the end frame is sent: sent is the whole stream

	stop    context.CancelFunc // stops the relay
	stopped chan struct{}      // closed once the relay has stopped
	err     error              // why it stopped, once it has
}

// newSource prepares the stream of the image, encoded as send. skip is how
// many stream bytes every child already has: they are encoded again (the
// stream must be byte for byte the same) but not paced. The source's
// relay runs until ctx ends.
func (s *Server) newSource(ctx context.Context, send imaging.Encoding, skip int64) (*source, error) {
	// The source has no disk to write, and nodes may need the end of the
	// stream after it was sent.
	s.mu.Lock()
	history := s.history
	s.history = nil
	s.mu.Unlock()
	f, err := s.newFeed(ctx, send, relay.Config{NoLocalCopy: true, ServeLate: true, History: history})
	if err != nil {
		return nil, err
	}
	return &source{feed: f, s: s, header: f.enc.Header(), skip: skip, digest: make(chan imaging.Digest, 1)}, nil
}

// newFeed makes a stream of the image, encoded as send, and starts its
// relay under ctx. On error nothing it opened is left open; once it has
// returned a feed, either its stream runs or close gives it back.
func (s *Server) newFeed(ctx context.Context, send imaging.Encoding, cfg relay.Config) (*feed, error) {
	enc, err := stream.NewEncoder(s.img, s.cast, s.cfg.FrameSize, send)
	if err != nil {
		return nil, err
	}
	if k := s.frameKey(); k != nil {
		k.Sign(s.signer) // so that relays, which hold the key too, cannot forge
		enc.SetKey(k)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		enc.Close()
		return nil, err
	}
	r, err := relay.New(cfg)
	if err != nil {
		enc.Close()
		pr.Close()
		pw.Close()
		return nil, err
	}
	// What New opened is released when Run returns: run it at once.
	ctx, stop := context.WithCancel(ctx)
	f := &feed{enc: enc, relay: r, pr: pr, pw: pw, stop: stop, stopped: make(chan struct{})}
	go func() {
		f.err = r.Run(ctx)
		stop()
		close(f.stopped)
	}()
	return f, nil
}

// start hands the pipe to the relay as its upstream, then encodes the
// stream into it from a goroutine, skipping the pacing of the first skip
// bytes; the encoder's result comes on the channel returned. digest is
// handed the stream's digest once the end frame is written.
func (f *feed) start(ctx context.Context, rate float64, skip int64, digest func(imaging.Digest)) (<-chan error, error) {
	if _, err := f.relay.SetUpstream(ctx, f.pr); err != nil {
		return nil, err
	}
	encErr := make(chan error, 1)
	go func() {
		err := encode(ctx, f.enc, f.pw, rate, skip, &f.sent, f.relay.EndSeen, digest)
		f.ended.Store(err == nil)
		f.pw.Close()
		encErr <- err
	}()
	return encErr, nil
}

// close stops the relay of a feed whose stream never started and
// releases what the feed holds.
func (f *feed) close() {
	f.stop()
	<-f.stopped
	f.enc.Close()
	f.pr.Close()
	f.pw.Close()
}

// frameKey is the cast's frame key, nil in an unkeyed cast. It depends on
// the cast's ID, which a restarted server takes from the nodes.
func (s *Server) frameKey() *stream.FrameKey {
	if s.cfg.Key == nil {
		return nil
	}
	return stream.NewFrameKey(s.cfg.Key, s.cast, s.cfg.Encrypt)
}

// run attaches the source's first children, then encodes the image into
// the relay and relays it until every child has the whole stream. It
// returns the first error of either; a child that cannot be reached is
// reported as down.
func (src *source) run(ctx context.Context, skip int64, kids func() []*nodeState) error {
	var wg sync.WaitGroup
	for _, n := range kids() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := src.attach(ctx, n); err != nil && ctx.Err() == nil {
				src.s.post(castEvent{kind: evDown, node: n, reason: err.Error()})
			}
		}()
	}
	wg.Wait()
	f := src.feed
	encErr, err := f.start(ctx, src.s.cfg.MaxRate, skip, func(d imaging.Digest) { src.digest <- d })
	if err != nil {
		f.close()
		return err
	}
	select {
	case err := <-encErr:
		if err != nil {
			return err
		}
		<-f.stopped
		return f.err
	case <-f.stopped:
		f.pw.Close()
		if f.err != nil {
			return f.err
		}
		return <-encErr
	}
}

// encode writes the stream's frames to w at the rate limit (if any),
// calls end once the end frame is written, and hands over the digest.
func encode(ctx context.Context, enc *stream.Encoder, w io.Writer, rate float64, skip int64, sent *atomic.Int64, end func(), digest func(imaging.Digest)) error {
	defer enc.Close()
	pace := newPacer(rate)
	var written int64
	for {
		c, err := enc.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if c.Kind == stream.FrameEnd {
			digest(enc.Digest())
			end()
		}
		bufs := net.Buffers{c.Header, c.Payload, c.Tag}
		n, err := bufs.WriteTo(w)
		if err != nil {
			return fmt.Errorf("stream: %w", err)
		}
		sent.Add(n)
		written += n
		// Bytes every child already has are not worth waiting for.
		if written > skip {
			if err := pace.wait(ctx, int(min(n, written-skip))); err != nil {
				return err
			}
		}
	}
}

// attach connects to a child node and streams to it from where it is:
// from the relay's history, or from an encoder of its own when the
// history no longer holds the child's position.
func (src *source) attach(ctx context.Context, n *nodeState) error {
	if src.s.peer(n).Paced {
		// A node served apart must never hold the others back: it gets a
		// stream of its own once the source's link is free, and is not
		// stalled while it waits.
		src.s.mu.Lock()
		n.waiting = true
		src.s.mu.Unlock()
		if err := src.feed.relay.Drained(ctx); err != nil {
			return err
		}
		src.s.mu.Lock()
		n.waiting, n.lastMoved = false, time.Now()
		src.s.mu.Unlock()
		return src.attachSeparately(ctx, n)
	}
	c, pos, err := src.connect(ctx, n)
	if err != nil {
		return err
	}
	if err := src.relay.Attach(ctx, n.name, c, pos); err == nil {
		return nil
	}
	// Too far behind for the history: a stream of its own.
	c.Close()
	return src.attachSeparately(ctx, n)
}

// connect opens a data connection to n and learns from which byte of the
// stream n needs it.
func (src *source) connect(ctx context.Context, n *nodeState) (net.Conn, int64, error) {
	c, err := dial.Data(ctx, n.dataAddr, time.Now().Add(peerTimeout))
	if err != nil {
		return nil, 0, fmt.Errorf("dolly-server cannot connect to it at %s: %w", n.dataAddr, err)
	}
	pos, err := stream.OpenStream(c, src.header, src.s.frameKey(), src.s.peer(n).Token)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	return c, pos, nil
}

// attachSeparately serves one child from a new encoder of the same stream,
// which skips what the child has. It costs the source a second stream.
func (src *source) attachSeparately(ctx context.Context, n *nodeState) error {
	c, pos, err := src.connect(ctx, n)
	if err != nil {
		return err
	}
	f, err := src.s.newFeed(ctx, src.header.Encoding, relay.Config{NoLocalCopy: true})
	if err != nil {
		c.Close()
		return err
	}
	if err := f.relay.Attach(ctx, n.name, c, pos); err != nil {
		c.Close()
		f.close()
		return err
	}
	// What the child has is encoded again, not paced.
	if _, err := f.start(ctx, src.s.cfg.MaxRate, pos, func(imaging.Digest) {}); err != nil {
		f.close() // the relay closes c as it stops
		return err
	}
	src.mu.Lock()
	src.extras = append(src.extras, f)
	src.mu.Unlock()
	src.s.log.Info("serving a node from a stream of its own", "node", n.name, "pos", pos)
	return nil
}

// detach stops sending to a child of the source.
func (src *source) detach(ctx context.Context, name string) {
	src.relay.Detach(ctx, name)
	src.mu.Lock()
	extras := append([]*feed(nil), src.extras...)
	src.mu.Unlock()
	for _, f := range extras {
		f.relay.Detach(ctx, name)
	}
}
