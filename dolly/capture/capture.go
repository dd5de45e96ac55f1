// Package capture sends a golden PC's disk to dolly-server -capture, which
// stores it as an image: read-only, its file systems' free blocks left out
// (they go as zeros, which zstd compresses away), compressed with zstd on
// the way, and checked by the server against the digest of what was read.
package capture

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/dial"
	"dolly/dolly/probe"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/imaging/blockmap"
	"dolly/internal/units"
)

// Config is one capture.
type Config struct {
	Server string // dolly-server -capture's address, HOST:PORT
	Source string // the disk or partition to capture: a block device or an image file
	Name   string
	Key    castkey.Key // the cast key the server holds, if it has one
	// Force reads a source that is mounted or in use (its file systems
	// may change while they are read).
	Force bool
	// AllBlocks sends every block, the free ones too.
	AllBlocks     bool
	JoinTimeout   time.Duration // to reach the server; 0: keep trying
	ProgressEvery time.Duration
	Out           io.Writer // progress lines
	Logger        *slog.Logger
}

// Result is what was captured.
type Result struct {
	Size, Used int64 // the source's bytes, and those its block map keeps
	FS         string
	Sent       int64 // stream bytes
	Digest     imaging.Digest
	Seconds    float64
	// Started says the server took the capture: a failure after it is
	// the capture's, one before it the command's.
	Started bool
}

// Run captures cfg.Source to the server. It returns once the server has
// stored the image and checked its digest.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 5 * time.Second
	}
	if cfg.Key != nil {
		cfg.Key = cfg.Key.Capture()
	}
	if err := imaging.CheckTargetUse(cfg.Source); err != nil && !(cfg.Force && errors.Is(err, imaging.ErrTargetInUse)) {
		return Result{}, fmt.Errorf("%w: its file systems may change while they are read; unmount them first (or -force)", err)
	}
	im, err := imaging.OpenImage(cfg.Source) // read only: nothing is written to the source
	if err != nil {
		return Result{}, err
	}
	defer im.Close()
	if im.Encoding != imaging.Raw {
		return Result{}, fmt.Errorf("%s is already a %s image: cast it, it needs no capture", cfg.Source, im.Encoding)
	}
	res := Result{Size: im.Size, Used: im.Size}
	var used []byte
	if !cfg.AllBlocks {
		m, err := im.ReadMap()
		switch {
		case errors.Is(err, blockmap.ErrUnknown):
		case err != nil:
			return res, fmt.Errorf("%w; or pass -all-blocks to send every block as it is", err)
		default:
			if err := im.UseMap(m); err != nil {
				return res, err
			}
			if used, err = m.Encode(maxMap); err != nil {
				return res, err
			}
			res.Used, res.FS = m.UsedBytes(), m.FS
		}
	}

	c, err := connect(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var nonce []byte
	if cfg.Key != nil {
		nonce = castkey.NewNonce()
	}
	hello := control.Hello{Version: stream.Version, Name: cfg.Name, Machine: probe.MachineID(), Nonce: nonce,
		Capture: &control.Capture{Source: cfg.Source, Size: im.Size}}
	if err := c.Send(control.Message{Type: control.MsgHello, Hello: &hello}); err != nil {
		return res, err
	}
	m, err := control.NodeHandshake(c, cfg.Key, nonce, peerTimeout)
	switch {
	case err != nil:
		return res, err
	case m.Type == control.MsgReject:
		return res, fmt.Errorf("server refused the capture: %s", m.Reason)
	case m.Type != control.MsgWelcome:
		return res, fmt.Errorf("server answered %s to the capture", m.Type)
	}
	cast := m.Welcome.Cast
	res.Started = true
	if err := c.Send(control.Message{Type: control.MsgCapture, Capture: &control.Capture{Source: cfg.Source, Size: im.Size, UsedMap: used}}); err != nil {
		return res, err
	}
	enc, err := stream.NewEncoder(im, cast, stream.DefaultFrameSize, imaging.Zstd)
	if err != nil {
		return res, err
	}
	if cfg.Key != nil {
		enc.SetKey(stream.NewFrameKey(cfg.Key, cast, false))
	}
	fmt.Fprintf(cfg.Out, "dolly capture: sending %s (%s, %s in use) to %s\n", cfg.Source, units.FormatBytes(res.Size), units.FormatBytes(res.Used), cfg.Server)
	start := time.Now()
	_, raw := c.Raw()
	sent, err := send(enc, raw, cfg, start)
	res.Sent, res.Digest = sent, enc.Digest()
	if err != nil {
		// A server that gave up says why before it closes.
		if m, rerr := c.Recv(2 * time.Second); rerr == nil && m.Type == control.MsgResult && !m.Result.OK {
			return res, fmt.Errorf("the server stopped the capture: %s", m.Result.Message)
		}
		return res, fmt.Errorf("sending the stream: %w", err)
	}
	// The server decodes what it stored before it answers.
	m, err = c.Recv(resultTimeout)
	switch {
	case err != nil:
		return res, fmt.Errorf("waiting for the server's verdict: %w", err)
	case m.Type != control.MsgResult:
		return res, fmt.Errorf("server answered %s to the stream", m.Type)
	case !m.Result.OK:
		return res, fmt.Errorf("the server did not store the image: %s", m.Result.Message)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

const (
	// maxMap bounds the block map sent; a longer one goes coarser.
	maxMap = 256 << 10
	// peerTimeout is how long the server may take to answer a message.
	peerTimeout = 15 * time.Second
	// resultTimeout is how long it may take to store the last bytes.
	resultTimeout = 5 * time.Minute
)

// connect reaches the server, within cfg.JoinTimeout if set.
func connect(ctx context.Context, cfg Config) (*control.Conn, error) {
	if cfg.JoinTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.JoinTimeout)
		defer cancel()
	}
	conn, err := dial.Backoff(ctx, cfg.Server, 100*time.Millisecond, 5*time.Second, func(attempt int, err error) {
		if attempt%10 == 0 && cfg.Logger != nil {
			cfg.Logger.Info("waiting for dolly-server", "server", cfg.Server, "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cannot reach dolly-server at %s: %w", cfg.Server, err)
	}
	return control.NewConn(conn), nil
}

// send writes the stream to w, saying how far it is every so often.
func send(enc *stream.Encoder, w io.Writer, cfg Config, start time.Time) (int64, error) {
	defer enc.Close()
	bw := bufio.NewWriterSize(w, 1<<20)
	var sent int64
	next := time.Now().Add(cfg.ProgressEvery)
	head := enc.Header().MarshalBinary()
	if _, err := bw.Write(head); err != nil {
		return 0, err
	}
	sent += int64(len(head))
	for {
		ch, err := enc.Next()
		if errors.Is(err, io.EOF) {
			return sent, bw.Flush()
		}
		if err != nil {
			return sent, err
		}
		n, err := (&net.Buffers{ch.Header, ch.Payload, ch.Tag}).WriteTo(bw)
		sent += n
		if err != nil {
			return sent, err
		}
		if now := time.Now(); now.After(next) {
			fmt.Fprintf(cfg.Out, "dolly capture: %s sent, %.1f MB/s\n", units.FormatBytes(sent), float64(sent)/1e6/now.Sub(start).Seconds())
			next = now.Add(cfg.ProgressEvery)
		}
	}
}
