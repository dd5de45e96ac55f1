package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/imaging/blockmap"
	"dolly/internal/units"
)

// CaptureConfig is a server that stores one node's disk as an image
// (dolly capture on the golden PC) instead of casting one.
type CaptureConfig struct {
	Listen string
	// Output is the image file to write: a zstd file that opens with the
	// disk's block map (see imaging.MapFrame). It must not exist.
	Output string
	// Key, if set, is the cast key the node must prove it holds; the
	// stream's frames are authenticated under it.
	Key           castkey.Key
	ProgressEvery time.Duration
	Out           io.Writer
	Logger        *slog.Logger
	// Ready, if set, is called with the listening address.
	Ready func(net.Addr)
}

// CaptureSummary is what a capture stored.
type CaptureSummary struct {
	Node, Source string
	Size         int64 // raw bytes of the disk
	Used         int64 // bytes its block map keeps (Size without one)
	Stored       int64 // bytes of the image file
	Digest       imaging.Digest
	Seconds      float64
}

// Capture waits for one node that captures its disk, stores the disk as
// cfg.Output and returns once the image is whole and its digest checked.
// Nothing is left at cfg.Output unless it is.
func Capture(ctx context.Context, cfg CaptureConfig) (CaptureSummary, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 5 * time.Second
	}
	if cfg.Key != nil {
		cfg.Key = cfg.Key.Capture()
	}
	switch _, err := os.Stat(cfg.Output); {
	case err == nil:
		return CaptureSummary{}, fmt.Errorf("%s exists: remove it, or capture to another file", cfg.Output)
	case !errors.Is(err, fs.ErrNotExist):
		return CaptureSummary{}, err
	}
	partial := cfg.Output + ".partial"
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return CaptureSummary{}, fmt.Errorf("capturing to %s: %w", cfg.Output, err)
	}
	stored := false
	defer func() {
		if !stored {
			f.Close()
			os.Remove(partial)
		}
	}()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return CaptureSummary{}, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}
	fmt.Fprintf(cfg.Out, "dolly-server: capturing to %s: waiting on %s for the golden PC (dolly capture -server HOST:PORT -source DISK)\n", cfg.Output, ln.Addr())
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	c := &capture{cfg: cfg, file: f}
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel has closed the other connections
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Connections are served side by side: one that never proves the key
	// holds nobody up. The first that does is the capture.
	done := make(chan captured, 1)
	acceptErr := make(chan error, 1)
	wg.Add(1) // held while it adds the connections'
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if sum, taken, err := c.serve(ctx, control.NewConn(conn)); taken {
					done <- captured{sum, err}
				}
			}()
		}
	}()
	var got captured
	select {
	case got = <-done:
	case err := <-acceptErr:
		if ctx.Err() != nil {
			return CaptureSummary{}, ctx.Err()
		}
		return CaptureSummary{}, fmt.Errorf("accepting: %w", err)
	}
	ln.Close()
	if got.err != nil {
		return got.sum, got.err
	}
	if err := publish(partial, cfg.Output); err != nil {
		stored = errors.Is(err, errAppeared) // the image stays, under its .partial name
		return got.sum, err
	}
	stored = true
	return got.sum, nil
}

type captured struct {
	sum CaptureSummary
	err error
}

// errAppeared means a file took the image's name while it was written.
var errAppeared = errors.New("appeared while the image was written")

// publish puts the whole image at its name, never over a file that
// appeared there meanwhile, and syncs the directory.
func publish(partial, output string) error {
	err := os.Link(partial, output)
	switch {
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s %w: the image is left as %s", output, errAppeared, partial)
	case err != nil:
		// A file system without hard links: renamed instead.
		if _, serr := os.Stat(output); serr == nil {
			return fmt.Errorf("%s %w: the image is left as %s", output, errAppeared, partial)
		}
		if err := os.Rename(partial, output); err != nil {
			return err
		}
	default:
		os.Remove(partial)
	}
	if d, err := os.Open(filepath.Dir(output)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// capture is one capture in progress.
type capture struct {
	cfg   CaptureConfig
	file  *os.File
	taken atomic.Bool // a node has proved the key and is sending
}

// serve takes a node's connection. taken says the node was a capturing
// one that proved the key (if any): its outcome is the capture's.
func (c *capture) serve(ctx context.Context, conn *control.Conn) (sum CaptureSummary, taken bool, err error) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // Ctrl-C ends a capture under way
	defer stop()
	log := c.cfg.Logger
	conn.SetLimit(preAuthLimit)
	m, err := conn.Recv(helloTimeout)
	if err != nil || m.Type != control.MsgHello {
		log.Warn("no hello", "from", conn.RemoteAddr(), "err", err)
		return sum, false, nil
	}
	h := m.Hello
	if err := checkHello(h); err != nil {
		conn.Send(control.Message{Type: control.MsgReject, Reason: err.Error()})
		return sum, false, nil
	}
	if h.Capture == nil {
		conn.Send(control.Message{Type: control.MsgReject, Reason: "this server captures an image and casts none: run dolly capture on the golden PC"})
		fmt.Fprintf(c.cfg.Out, "  refused %s from %s: it came to join a cast\n", h.Name, conn.RemoteAddr())
		return sum, false, nil
	}
	if err := control.ServerHandshake(conn, c.cfg.Key, h, peerTimeout); err != nil {
		conn.Send(control.Message{Type: control.MsgReject, Reason: err.Error()})
		fmt.Fprintf(c.cfg.Out, "  refused %s from %s: %v\n", h.Name, conn.RemoteAddr(), err)
		return sum, false, nil
	}
	if !c.taken.CompareAndSwap(false, true) {
		conn.Send(control.Message{Type: control.MsgReject, Reason: "another PC's capture is under way"})
		return sum, false, nil
	}
	conn.SetLimit(control.MaxMessage)
	var id stream.CastID
	rand.Read(id[:])
	if err := conn.Send(control.Message{Type: control.MsgWelcome, Welcome: &control.Welcome{Cast: id, Image: c.cfg.Output, ImageSize: h.Capture.Size}}); err != nil {
		return sum, true, fmt.Errorf("%s: %w", h.Name, err)
	}
	sum, err = c.receive(ctx, conn, h, id)
	result := control.Result{OK: err == nil, Message: "captured and verified"}
	if err != nil {
		result.Message = err.Error()
	}
	conn.Send(control.Message{Type: control.MsgResult, Result: &result})
	return sum, true, err
}

// receive takes the node's capture message and stream and stores them.
func (c *capture) receive(ctx context.Context, conn *control.Conn, h *control.Hello, id stream.CastID) (CaptureSummary, error) {
	sum := CaptureSummary{Node: h.Name, Source: h.Capture.Source, Size: h.Capture.Size, Used: h.Capture.Size}
	fail := func(err error) (CaptureSummary, error) {
		return sum, fmt.Errorf("capture from %s: %w", h.Name, err)
	}
	m, err := conn.Recv(peerTimeout)
	switch {
	case err != nil:
		return fail(err)
	case m.Type == control.MsgFail:
		return fail(errors.New(m.Reason))
	case m.Type != control.MsgCapture || m.Capture.Size != h.Capture.Size:
		return fail(fmt.Errorf("a %s message where the capture's was due", m.Type))
	}
	out := bufio.NewWriterSize(c.file, 1<<20)
	if len(m.Capture.UsedMap) > 0 {
		used, err := blockmap.Decode(m.Capture.UsedMap)
		if err == nil && used.Size != sum.Size {
			err = fmt.Errorf("a map of %d bytes for a disk of %d", used.Size, sum.Size)
		}
		if err != nil {
			return fail(fmt.Errorf("its block map: %w", err))
		}
		frame, err := imaging.MapFrame(used)
		if err != nil {
			return fail(err)
		}
		out.Write(frame)
		sum.Used = used.UsedBytes()
		fmt.Fprintf(c.cfg.Out, "  %s: %s of %s, %s: %s in use, the free blocks not sent\n", h.Name, h.Capture.Source, units.FormatBytes(sum.Size), used.FS, units.FormatBytes(sum.Used))
	} else {
		fmt.Fprintf(c.cfg.Out, "  %s: %s of %s, no file system it maps: every block is sent\n", h.Name, h.Capture.Source, units.FormatBytes(sum.Size))
	}
	r, _ := conn.Raw()
	head := make([]byte, stream.StreamHeaderLen)
	if _, err := io.ReadFull(r, head); err != nil {
		return fail(fmt.Errorf("reading the stream header: %w", err))
	}
	sh, err := stream.ParseStreamHeader(head)
	if err != nil {
		return fail(err)
	}
	var key *stream.FrameKey
	if c.cfg.Key != nil {
		key = stream.NewFrameKey(c.cfg.Key, id, false)
	}
	switch {
	case sh.Cast != id:
		return fail(errors.New("the stream is another capture's"))
	case sh.ImageSize != sum.Size || sh.Encoding != imaging.Zstd:
		return fail(fmt.Errorf("a %s stream of %d bytes for a disk of %d; want zstd", sh.Encoding, sh.ImageSize, sum.Size))
	}
	if err := sh.Verify(key); err != nil {
		return fail(err)
	}
	start := time.Now()
	var counters stream.Counters
	stopProgress := c.progress(h.Name, sum.Size, &counters)
	digest, _, err := stream.ReceiveStored(r, sh, key, out, &counters)
	stopProgress()
	if err == nil {
		err = out.Flush()
	}
	if err == nil {
		err = c.file.Sync()
	}
	if err == nil {
		err = c.file.Close()
	}
	if err != nil {
		return fail(err)
	}
	sum.Digest, sum.Seconds = digest, time.Since(start).Seconds()
	if st, err := os.Stat(c.file.Name()); err == nil {
		sum.Stored = st.Size()
	}
	return sum, ctx.Err()
}

// progress prints how far the capture is until the returned stop.
func (c *capture) progress(node string, size int64, counters *stream.Counters) (stop func()) {
	start := time.Now()
	return every(c.cfg.ProgressEvery, func() {
		raw := counters.Written.Load()
		fmt.Fprintf(c.cfg.Out, "  %s: %5.1f%% of %s, %s stored, %.1f MB/s\n", node, 100*float64(raw)/float64(max(size, 1)),
			units.FormatBytes(size), units.FormatBytes(counters.Stream.Load()), float64(raw)/1e6/time.Since(start).Seconds())
	})
}

// every calls f every period, from a goroutine of its own, until the
// returned stop, which returns once f is no longer running.
func every(period time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(quit); <-done }
}
