package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"dolly/dolly/relay"
	"dolly/imaging"
	"dolly/internal/units"
)

// probeTargetWrite measures how fast the cast's write path reaches the
// target, and what it costs the CPU, without changing a byte: it reads
// blocks (with O_DIRECT, so they are not cached), drops any cached copy and
// writes the same bytes back the way a cast does (with O_DIRECT to a block
// device unless buffered, through the page cache otherwise), then syncs. A
// block device that is mounted or held by another program is left alone. A
// missing file is measured by writing a temporary file next to it.
//
// Its CPU figure is this thread's time (and the kernel threads'), not the
// process's: the node measures its CPU meanwhile, on another thread.
func probeTargetWrite(ctx context.Context, path string, budget time.Duration, buffered bool) (d diskProbe, err error) {
	OnOneThread(func(clock func() time.Duration) {
		if clock() == 0 { // no thread clock here
			clock = ProcessCPU
		}
		if _, serr := os.Stat(path); errors.Is(serr, os.ErrNotExist) {
			d, err = probeTempWrite(ctx, filepath.Dir(path), budget, clock)
			return
		}
		d, err = targetWrite(ctx, path, budget, buffered, clock)
	})
	return d, err
}

// targetWrite is probeTargetWrite's measurement, its CPU timed by clock.
func targetWrite(ctx context.Context, path string, budget time.Duration, buffered bool, clock func() time.Duration) (diskProbe, error) {
	t, err := openTarget(path, buffered)
	if err != nil {
		return diskProbe{}, err
	}
	defer t.close()
	in, out, direct, outDirect := t.in, t.out, t.inDirect, t.outDirect
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		return diskProbe{}, err
	}
	// As much as the budget allows, up to half the target: a few dozen
	// megabytes would time a drive's (or a VM host's) write cache, not
	// the rate it sustains over a cast.
	region := min(size/2/probeBlock*probeBlock, maxProbeRegion)
	if region < probeBlock {
		return diskProbe{}, fmt.Errorf("%s is too small to measure", path)
	}
	start := (size/2)/probeBlock*probeBlock - region/2
	// Whatever of the target is still dirty (a file just filled, say) is
	// flushed first and untimed: the final sync must flush only the
	// probe's own writes, or it times someone else's.
	if err := out.Sync(); err != nil {
		return diskProbe{}, err
	}
	// Through the page cache, the node writes behind (see
	// imaging.WriteBehind), and so does the probe: a first pass, untimed,
	// leaves the pages a cast recycles after its first megabytes, so the
	// timed pass pays what a cast pays all along, not for fresh memory
	// (which costs far more in a virtual machine). An eighth of the budget
	// writes more than the write-behind keeps in flight.
	behind := (*imaging.WriteBehind)(nil)
	// The reads are not timed: a cast does not read its target. Through
	// the page cache they go a chunk at a time, and each chunk is written
	// back and on the disk before the next is read, so that the disk
	// writes only while the clock runs; an O_DIRECT write is on the disk
	// when it returns, so there a block is a chunk.
	chunk := int64(probeBlock)
	if !outDirect {
		behind = imaging.NewWriteBehind(out)
		// Two chunks at least: one warms, the other is timed.
		chunk = max(min(probeChunk, region/2/probeBlock*probeBlock), probeBlock)
	}
	buf := imaging.AlignedBuffer(int(chunk))
	var wrote int64
	var spent, cpu, synced time.Duration
	// Each chunk's CPU per byte, for the median: the kernel threads' time
	// is the whole machine's, and a chunk now and then pays for someone
	// else's writeback (other nodes of the machine, a file just written).
	var chunkCosts []float64
	// The write's cost counts the kernel threads' work for it too (a loop
	// device's worker, writeback), but not the reads'.
	kernel := FindKernelThreads()
	// Each pass goes on from where the last stopped: a cast writes a
	// block once, so the timed pass must not rewrite what the first pass
	// did (in a fresh file, the first write of a block also allocates it).
	off := start
	pass := func(end int64, deadline time.Time, timed bool) error {
		for ; off < end && time.Now().Before(deadline) && ctx.Err() == nil; off += chunk {
			n := min(chunk, end-off)
			for b := int64(0); b < n; b += probeBlock {
				if _, err := in.ReadAt(buf[b:b+probeBlock], off+b); err != nil {
					return fmt.Errorf("reading %s: %w", path, err)
				}
			}
			unix.Fadvise(int(out.Fd()), off, n, unix.FADV_DONTNEED)
			kernel.Since()
			t, c := time.Now(), clock()
			for b := int64(0); b < n; b += probeBlock {
				if _, err := out.WriteAt(buf[b:b+probeBlock], off+b); err != nil {
					return fmt.Errorf("writing %s: %w", path, err)
				}
				if behind != nil {
					if err := behind.Wrote(off+b, probeBlock); err != nil {
						return fmt.Errorf("writing %s: %w", path, err)
					}
				}
			}
			if behind != nil {
				if err := behind.Finish(); err != nil {
					return fmt.Errorf("writing %s: %w", path, err)
				}
			}
			if timed {
				used := clock() - c + kernel.Since()
				spent, cpu = spent+time.Since(t), cpu+used
				wrote += n
				chunkCosts = append(chunkCosts, used.Seconds()/float64(n))
			}
		}
		kernel.Since()
		t, c := time.Now(), clock()
		if err := out.Sync(); err != nil {
			return err
		}
		if timed {
			synced = time.Since(t)
			spent, cpu = spent+synced, cpu+clock()-c+kernel.Since()
		}
		return nil
	}
	if behind != nil {
		// A quarter of the region at most: the rest is timed.
		if err := pass(start+max(region/4/chunk, 1)*chunk, time.Now().Add(budget/8), false); err != nil {
			return diskProbe{}, err
		}
	}
	if err := pass(start+region, time.Now().Add(budget), true); err != nil {
		return diskProbe{}, err
	}
	how := fmt.Sprintf("rewrote %s of %s in place", units.FormatBytes(wrote), path)
	if outDirect {
		how += " with O_DIRECT"
	}
	if !direct {
		how += " (cached reads)"
	}
	cpuRate := rate(wrote, cpu)
	if len(chunkCosts) >= 3 {
		if m := median(chunkCosts); m > 0 {
			cpuRate = 1 / m
		}
	}
	return diskProbe{rate: rate(wrote, spent), cpuRate: cpuRate, sync: synced, how: how, direct: outDirect}, nil
}

// targetFiles are a target opened to be measured in place: in reads it
// (with O_DIRECT where the file system allows it), out writes it the way a
// cast does (O_DIRECT to a block device unless buffered, through the page
// cache otherwise).
type targetFiles struct {
	in, out             *os.File
	inDirect, outDirect bool
}

// openTarget opens the target at path to be measured in place. A block
// device that is mounted or held by another program is refused.
func openTarget(path string, buffered bool) (targetFiles, error) {
	st, err := os.Stat(path)
	if err != nil {
		return targetFiles{}, err
	}
	block := st.Mode()&os.ModeDevice != 0
	flags := os.O_RDONLY
	if block {
		flags |= unix.O_EXCL // refused while mounted or held by another program
	}
	var t targetFiles
	t.in, t.inDirect, err = openDirect(path, flags)
	if err != nil {
		if block && errors.Is(err, unix.EBUSY) {
			return targetFiles{}, fmt.Errorf("%s is in use (mounted?): not measured", path)
		}
		return targetFiles{}, err
	}
	if block && !buffered {
		t.out, t.outDirect, err = openDirect(path, os.O_WRONLY)
	} else {
		t.out, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		t.in.Close()
		return targetFiles{}, err
	}
	return t, nil
}

func (t targetFiles) close() {
	t.in.Close()
	t.out.Close()
}

// maxProbeRegion bounds what the target write probe rewrites: a disk
// that reads and writes 256 MB in less than the budget (an NVMe drive, a
// loop device over a cached file) ends there, and its figure is timed to
// the end of the final sync, which puts what its write cache holds on the
// media; a slower disk is bounded by the budget first.
// probeChunk is what it reads ahead of writing through the page cache:
// several times what the node writes behind at once (see
// imaging.WriteBehind), so that starting each chunk leaves the disk idle
// only briefly.
const maxProbeRegion, probeChunk = 256 << 20, 32 << 20

// median is the middle of xs (the mean of the two middle ones for an even
// count); it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// probeTempWrite measures a directory's write rate with a temporary file,
// its CPU timed by clock.
func probeTempWrite(ctx context.Context, dir string, budget time.Duration, clock func() time.Duration) (diskProbe, error) {
	f, err := os.CreateTemp(dir, ".dolly-probe-*")
	if err != nil {
		return diskProbe{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := imaging.AlignedBuffer(probeBlock)
	StandardSample(buf, 3)
	var wrote int64
	kernel := FindKernelThreads()
	start, c := time.Now(), clock()
	for wrote < 64<<20 && time.Since(start) < budget && ctx.Err() == nil {
		if _, err := f.Write(buf); err != nil {
			return diskProbe{}, err
		}
		wrote += probeBlock
	}
	// Its sync flushes all it wrote, nothing like a cast's last flush:
	// the start-up is not told from it.
	if err := f.Sync(); err != nil {
		return diskProbe{}, err
	}
	return diskProbe{rate: rate(wrote, time.Since(start)), cpuRate: rate(wrote, clock()-c+kernel.Since()),
		how: fmt.Sprintf("wrote %s to a temporary file in %s", units.FormatBytes(wrote), dir)}, nil
}

// probeRead measures the read rate of a file or device.
func probeRead(ctx context.Context, path string, budget time.Duration) (float64, error) {
	f, _, err := openDirect(path, os.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	buf := imaging.AlignedBuffer(probeBlock)
	var read int64
	start := time.Now()
	// Spread over the file: the image is read whole in a cast.
	step := max(size/16/probeBlock*probeBlock, probeBlock)
	for off := int64(0); off+probeBlock <= size && time.Since(start) < budget && ctx.Err() == nil; off += step {
		n, err := f.ReadAt(buf, off)
		read += int64(n)
		if err != nil && err != io.EOF {
			return 0, err
		}
	}
	if read == 0 {
		return 0, errors.New("too small to measure")
	}
	return rate(read, time.Since(start)), nil
}

// openDirect opens with O_DIRECT, or without it where the filesystem
// refuses (tmpfs).
func openDirect(path string, flags int) (*os.File, bool, error) {
	f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0)
	if err == nil {
		return f, true, nil
	}
	if errors.Is(err, unix.EINVAL) {
		f, err = os.OpenFile(path, flags, 0)
		return f, false, err
	}
	return nil, false, err
}

// streamCost is the CPU time per byte of one TCP stream over loopback:
// buf written to it repeatedly, received and spliced away as a relay
// does. Loopback does both ends' kernel work in this process, so the time
// covers the sender's copy, two halves of a stream (a send and a receive)
// and the splice.
func streamCost(buf []byte, budget time.Duration) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no loopback: %w", err)
	}
	defer ln.Close()
	received := discardOne(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c0 := ProcessCPU()
	sent, err := sendFor(c.(*net.TCPConn), buf, budget)
	if err != nil {
		return 0, err
	}
	if err := <-received; err != nil {
		return 0, err
	}
	return perByte(ProcessCPU()-c0, sent)
}

// relayCost is the CPU time per byte of a relay node's data path, with
// the stream's ends around it, over loopback: buf is written to dolly's
// relay, which forwards it to one child (spliced away, as above) and
// hands its own copy to a reader that checks it with CRC-32C, as a node's
// does before writing. Less streamCost, that is one node's work in a
// chain: its stream in and out, the relay's splices and tee, the copy
// into its history and the check.
func relayCost(ctx context.Context, buf, history []byte, budget time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, budget+3*time.Second)
	defer cancel()
	p, err := startRelayPipe(ctx, history)
	if err != nil {
		return 0, err
	}
	defer p.close()
	c0 := ProcessCPU()
	sent, err := send(p.sender, buf, budget)
	if err != nil {
		return 0, err
	}
	// All of it is the stream: said before it ends, or the relay takes
	// the end for a cut and waits for another upstream.
	p.relay.EndSeen()
	if err := p.sender.CloseWrite(); err != nil {
		return 0, err
	}
	for _, done := range p.done {
		if err := <-done; err != nil {
			return 0, fmt.Errorf("relaying: %w", err)
		}
	}
	return perByte(ProcessCPU()-c0, sent)
}

// discardOne accepts one connection on ln and splices what it receives
// away, as a relay does; the channel says how that ended.
func discardOne(ln net.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- relay.Discard(c.(*net.TCPConn))
	}()
	return done
}

// sendFor writes buf to c as send does, then half-closes it.
func sendFor(c *net.TCPConn, buf []byte, budget time.Duration) (int64, error) {
	sent, err := send(c, buf, budget)
	if err != nil {
		return sent, err
	}
	return sent, c.CloseWrite()
}

// send writes buf to c repeatedly for budget, and on to 64 MiB while it
// has taken less than twice that: a path too slow to move 64 MiB in that
// time (a small machine, or a probe disturbed by something else) has
// enough bytes for its figure by then, and the join waits for every one.
func send(c io.Writer, buf []byte, budget time.Duration) (int64, error) {
	var sent int64
	start := time.Now()
	for t := time.Duration(0); t < budget || sent < 64<<20 && t < 2*budget; t = time.Since(start) {
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

func perByte(cpu time.Duration, n int64) (float64, error) {
	if cpu <= 0 || n <= 0 {
		return 0, errors.New("too fast to measure")
	}
	return cpu.Seconds() / float64(n), nil
}
