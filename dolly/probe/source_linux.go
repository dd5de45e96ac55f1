package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"dolly/dolly/relay"
)

// readCost is the CPU time per byte of reading the image through the page
// cache, as the source's encoder reads it (pread(2) into its buffer), on
// one thread: a copy out of the page cache walks pages a hot memory copy
// does not, and costs several times as much. The reads are spread over the
// image's data (a sparse file's holes are never read in a cast); pages
// not cached yet are read from the disk, whose wait costs no CPU time.
func readCost(ctx context.Context, path string, budget time.Duration) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if size < readChunk {
		return 0, errors.New("too small to measure")
	}
	buf := make([]byte, readChunk)
	step := max(size/64/readChunk*readChunk, readChunk)
	var off, read int64
	var failed error
	next := func() int {
		if ctx.Err() != nil || failed != nil {
			return 1 // ends the loop at its budget; the error is reported
		}
		data := nextData(f, off, size)
		n, err := f.ReadAt(buf, data)
		switch {
		case err != nil && err != io.EOF:
			failed = err
		case n == 0:
			failed = io.ErrUnexpectedEOF // the file shrank: no read would count
		}
		off = data + step
		read += int64(n)
		return max(n, 1)
	}
	rate := measure(budget, next)
	switch {
	case failed != nil:
		return 0, failed
	case ctx.Err() != nil:
		return 0, ctx.Err()
	case rate <= 0 || read == 0:
		return 0, errors.New("too fast to measure")
	}
	return 1 / rate, nil
}

// nextData is where the read probe reads next, from off on: the next
// stretch of data of a sparse file, from its first once past its last; off
// itself where the file system cannot tell (the whole file is data).
func nextData(f *os.File, off, size int64) int64 {
	if off+readChunk > size {
		off = 0
	}
	data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) && off > 0 { // no data past off
		data, err = unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	}
	if err != nil {
		return off
	}
	return min(data, size-readChunk)
}

// readChunk is what the read probe reads at a time, as the encoder does a
// frame's worth.
const readChunk = 1 << 20

// feedCost is the CPU time per byte of the source's data path with the
// stream's far end, over loopback: buf is written into a pipe, as the
// server's encoder writes its frames, and dolly's relay forwards the pipe
// with its history to one child (spliced away, as above). Less a stream's
// receive, that is the source's work for one child: the write into the
// pipe, the relay's splices and tee, the copy into its history and the
// send (with, over loopback or a veth, the receiving kernel's share a
// sender's softirq does).
func feedCost(ctx context.Context, buf, history []byte, budget time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, budget+3*time.Second)
	defer cancel()
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no loopback: %w", err)
	}
	defer down.Close()
	// The child is this process's own: a second without an acknowledgement
	// is a fault, not a slow disk.
	r, err := relay.New(relay.Config{NoLocalCopy: true, History: history, DeliveryStall: time.Second})
	if err != nil {
		return 0, err
	}
	// The history may be the cast's (Config.RelayHistory): no relay of
	// the probe may write it once this returns.
	ran, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		ran <- r.Run(ctx)
		close(stopped)
	}()
	defer func() {
		cancel()
		<-stopped
	}()
	sank := discardOne(down)
	child, err := net.Dial("tcp", down.Addr().String())
	if err != nil {
		return 0, err
	}
	if err := r.Attach(ctx, "probe", child, 0); err != nil {
		child.Close()
		return 0, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pw.Close()
	if _, err := r.SetUpstream(ctx, pr); err != nil {
		pr.Close()
		return 0, err
	}
	c0 := ProcessCPU()
	sent, err := send(pw, buf, budget)
	if err != nil {
		return 0, fmt.Errorf("feeding the relay: %w", err)
	}
	r.EndSeen() // all of it is the stream: its end is no cut
	pw.Close()
	for _, done := range []<-chan error{ran, sank} {
		if err := <-done; err != nil {
			return 0, fmt.Errorf("relaying: %w", err)
		}
	}
	return perByte(ProcessCPU()-c0, sent)
}
