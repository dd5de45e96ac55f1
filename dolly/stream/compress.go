package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"

	"dolly/imaging"
)

// maxCompressWorkers bounds the goroutines that compress a stream on the
// fly: each holds a chunk in and a chunk out, and past a few cores the
// source's link is the limit, not its CPU.
const maxCompressWorkers = 8

// CompressWorkers is how many goroutines compress a raw image on the fly:
// one a core, as many as the capacity model lets the source use
// (capacity.Resources.CompressThreads).
func CompressWorkers() int {
	return min(max(runtime.GOMAXPROCS(0), 1), maxCompressWorkers)
}

// compressOnTheFly has the stream carry raw compressed as send, as
// compressChunks does it at the level a cast can afford; holes, if not
// nil, tells where raw's file keeps holes.
func (e *Encoder) compressOnTheFly(raw io.Reader, holes *rawHoles, send imaging.Encoding) (io.Reader, int64) {
	pipe, digest := compressChunks(raw, holes, send, imaging.OnTheFly)
	e.later = digest
	e.stop = func() { pipe.CloseReader(errors.New("encoder closed")) }
	return pipe, -1
}

// CompressChunks writes raw to w compressed as send at level, chunk by
// chunk as a source compressing on the fly does (on all cores), and
// returns the digest of the raw bytes. It stops when ctx is done.
func CompressChunks(ctx context.Context, w io.Writer, raw io.Reader, send imaging.Encoding, level imaging.Level) (imaging.Digest, error) {
	pipe, digest := compressChunks(raw, nil, send, level)
	stop := context.AfterFunc(ctx, func() { pipe.CloseReader(ctx.Err()) })
	defer stop()
	if _, err := io.Copy(w, pipe); err != nil {
		// The pipe ends once its writer has drained the chunks, and that
		// is after the reader let go of raw, which the caller may close.
		pipe.CloseReader(err)
		io.Copy(io.Discard, pipe)
		return imaging.Digest{}, err
	}
	return <-digest, nil
}

// compressChunks reads the raw image from raw and digests it on one
// goroutine, compresses it chunk by chunk (imaging.ChunkEncoder) on
// CompressWorkers others, and hands the chunks to the pipe it returns, in
// order. On a machine of several cores the compression, the source's
// costliest work by far, then runs on all of them. The digest comes once
// raw has been read to its end; closing the pipe's reader stops it all.
// Where holes tells that a chunk lies wholly in a hole of raw's file, it
// is sent as zstd's zero frames, neither read nor compressed.
func compressChunks(raw io.Reader, holes *rawHoles, send imaging.Encoding, level imaging.Level) (*bufPipe, chan imaging.Digest) {
	workers := CompressWorkers()
	pipe := newBufPipe(2 * workers)
	later := make(chan imaging.Digest, 1)
	stopped := make(chan struct{})

	type chunk struct {
		raw, out []byte
		off      int64 // the image offset of raw
		eof      bool  // raw ends the image
		err      error
		done     chan struct{}
	}
	// Reading runs ahead of the oldest chunk by two chunks a worker at
	// most: todo feeds the workers, inOrder the writer.
	todo := make(chan *chunk, workers)
	inOrder := make(chan *chunk, 2*workers)
	free := make(chan []byte, 3*workers)
	// The compressed chunks' buffers go round too: compressing into a
	// fresh one, zstd grew it block by block, copying what it held and
	// faulting in fresh memory: a third of the path's CPU on data that
	// compresses to half (BenchmarkCompressSparse).
	outs := make(chan []byte, 4*workers)
	pipe.spent = func(b []byte) {
		select {
		case outs <- b[:0]:
		default:
		}
	}
	go func() { // read and digest
		defer close(todo)
		defer close(inOrder)
		d := imaging.NewDigester()
		var off int64
		if send != imaging.Zstd {
			holes = nil // only zstd has zero frames
		}
		for {
			if n, err := holes.skip(off); err != nil || n > 0 {
				c := &chunk{off: off, eof: off+n == holes.size, err: err, done: make(chan struct{})}
				if err == nil {
					d.WriteZeros(n)
					c.out = imaging.AppendZstdZeros(nil, n)
				}
				close(c.done)
				off += n
				select {
				case inOrder <- c:
				case <-stopped:
					return
				}
				if c.eof || err != nil {
					if err == nil {
						later <- d.Sum()
					}
					return
				}
				continue
			}
			var buf []byte
			select {
			case buf = <-free:
			default:
				buf = make([]byte, imaging.ChunkSize)
			}
			n, err := io.ReadFull(raw, buf)
			if n > 0 {
				d.Write(buf[:n])
				c := &chunk{raw: buf[:n], off: off, eof: err != nil, done: make(chan struct{})}
				off += int64(n)
				select {
				case inOrder <- c:
				case <-stopped:
					return
				}
				todo <- c
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				later <- d.Sum()
				return
			}
			if err != nil {
				c := &chunk{err: err, done: make(chan struct{})}
				close(c.done)
				select {
				case inOrder <- c:
				case <-stopped:
				}
				return
			}
		}
	}()
	for range workers {
		go func() {
			enc, err := imaging.NewChunkEncoder(send, level)
			for c := range todo {
				if err != nil {
					c.err = err
				} else {
					var out []byte
					select {
					case out = <-outs:
					default:
					}
					c.out, c.err = enc.Encode(out, c.raw, c.off, c.eof)
				}
				close(c.done)
			}
		}()
	}
	go func() { // write in order
		var err error
		for c := range inOrder {
			<-c.done
			if err == nil {
				if err = c.err; err == nil {
					err = pipe.give(c.out)
				}
				if err != nil {
					close(stopped) // the reader stops; the rest drains
				}
			}
			if cap(c.raw) == imaging.ChunkSize {
				select {
				case free <- c.raw[:cap(c.raw)]:
				default:
				}
			}
		}
		pipe.CloseWriter(err)
	}()
	return pipe, later
}

// rawHoles tells where a raw image's file keeps holes
// (imaging.Image.NextData, which counts a file system's free blocks
// too) and steps its reader over them. Compressing on the fly read the
// holes as zeros: on the bench's 1 GiB ext4 image (70% holes), that was
// a fifth of the source's CPU time in a cast, which the capacity model,
// like the raw stream, takes for holes not read.
type rawHoles struct {
	next func(off int64) (data, hole int64, ok bool)
	seek io.Seeker
	size int64
	data int64 // the data from the last call to next ends here
	// skipped counts the bytes skipped unread, for tests: the chunks are
	// read on a goroutine of their own.
	skipped atomic.Int64
}

// skip returns how many bytes of the chunk at off lie wholly in a hole
// that is sent as a zero run unread (imaging.HoleRun), which the reader has
// stepped over: the chunk's length, or 0 if any of it is data (or unknown,
// or too short). A nil h skips none.
func (h *rawHoles) skip(off int64) (int64, error) {
	if h == nil || h.next == nil || off >= h.size {
		return 0, nil
	}
	n := min(imaging.ChunkSize, h.size-off)
	if off+n <= h.data {
		return 0, nil
	}
	data, hole, ok := h.next(off)
	if !ok {
		h.next = nil
		return 0, nil
	}
	if end, run := imaging.HoleRun(off, data, h.size); !run || end < off+n {
		h.data = hole
		return 0, nil
	}
	if _, err := h.seek.Seek(off+n, io.SeekStart); err != nil {
		return 0, fmt.Errorf("reading image at offset %d: %w", off+n, err)
	}
	h.skipped.Add(n)
	return n, nil
}
