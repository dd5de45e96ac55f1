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
	s      *Server
	enc    *stream.Encoder
	relay  *relay.Relay
	header stream.StreamHeader
	sent   atomic.Int64 // stream bytes encoded (once, not per child)
	ended  atomic.Bool  // the end frame is sent: sent is the whole stream
	skip   int64        // stream bytes every child had already
	digest chan imaging.Digest

	// extra streams serve children the relay's history cannot: each its
	// own encoder from the start of the image.
	mu     sync.Mutex
	extras []*relay.Relay
}

// newSource prepares the stream of the image as p sends it. skip is how
// many stream bytes every child already has: they are encoded again (the
// stream must be byte for byte the same) but not paced.
func (s *Server) newSource(send imaging.Encoding, skip int64) (*source, error) {
	enc, err := stream.NewEncoder(s.img, s.cast, s.cfg.FrameSize, send)
	if err != nil {
		return nil, err
	}
	enc.SetKey(s.frameKey())
	// The source has no disk to write, and nodes may need the end of the
	// stream after it was sent.
	r, err := relay.New(relay.Config{NoLocalCopy: true, ServeLate: true})
	if err != nil {
		enc.Close()
		return nil, err
	}
	src := &source{s: s, enc: enc, relay: r, header: enc.Header(), skip: skip, digest: make(chan imaging.Digest, 1)}
	return src, nil
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
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	relayDone := make(chan error, 1)
	go func() { relayDone <- src.relay.Run(ctx) }()
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
	if _, err := src.relay.SetUpstream(ctx, pr); err != nil {
		pw.Close()
		return err
	}
	encErr := make(chan error, 1)
	go func() {
		err := encode(ctx, src.enc, pw, src.s.cfg.MaxRate, skip, &src.sent, src.relay.EndSeen, func(d imaging.Digest) { src.digest <- d })
		src.ended.Store(err == nil)
		pw.Close()
		encErr <- err
	}()
	select {
	case err := <-encErr:
		if err != nil {
			return err
		}
		return <-relayDone
	case err := <-relayDone:
		pw.Close()
		if err == nil {
			err = <-encErr
		}
		return err
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
	c, err := dial.Data(ctx, n.dataAddr, time.Now().Add(peerTimeout))
	if err != nil {
		return fmt.Errorf("dolly-server cannot connect to it at %s: %w", n.dataAddr, err)
	}
	pos, err := stream.OpenStream(c, src.header, src.s.frameKey())
	if err != nil {
		c.Close()
		return err
	}
	if err := src.relay.Attach(ctx, n.name, c, pos); err == nil {
		return nil
	}
	// Too far behind for the history: a stream of its own.
	c.Close()
	return src.attachSeparately(ctx, n)
}

// attachSeparately serves one child from a new encoder of the same stream,
// which skips what the child has. It costs the source a second stream.
func (src *source) attachSeparately(ctx context.Context, n *nodeState) error {
	s := src.s
	enc, err := stream.NewEncoder(s.img, s.cast, s.cfg.FrameSize, src.header.Encoding)
	if err == nil {
		enc.SetKey(src.s.frameKey())
	}
	if err != nil {
		return err
	}
	relay, err := relay.New(relay.Config{NoLocalCopy: true})
	if err != nil {
		enc.Close()
		return err
	}
	c, err := dial.Data(ctx, n.dataAddr, time.Now().Add(peerTimeout))
	if err != nil {
		enc.Close()
		return fmt.Errorf("dolly-server cannot connect to it at %s: %w", n.dataAddr, err)
	}
	pos, err := stream.OpenStream(c, src.header, src.s.frameKey())
	if err != nil {
		c.Close()
		enc.Close()
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		c.Close()
		enc.Close()
		return err
	}
	go relay.Run(ctx)
	if _, err := relay.SetUpstream(ctx, pr); err != nil {
		return err
	}
	if err := relay.Attach(ctx, n.name, c, pos); err != nil {
		return err
	}
	src.mu.Lock()
	src.extras = append(src.extras, relay)
	src.mu.Unlock()
	var sent atomic.Int64
	go func() {
		encode(ctx, enc, pw, s.cfg.MaxRate, pos, &sent, relay.EndSeen, func(imaging.Digest) {})
		pw.Close()
	}()
	s.log.Info("serving a node from a stream of its own", "node", n.name, "pos", pos)
	return nil
}

// detach stops sending to a child of the source.
func (src *source) detach(ctx context.Context, name string) {
	src.relay.Detach(ctx, name)
	src.mu.Lock()
	extras := append([]*relay.Relay(nil), src.extras...)
	src.mu.Unlock()
	for _, r := range extras {
		r.Detach(ctx, name)
	}
}
