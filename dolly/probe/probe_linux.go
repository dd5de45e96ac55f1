package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
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
func probeTargetWrite(ctx context.Context, path string, budget time.Duration, buffered bool) (diskProbe, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return probeTempWrite(ctx, filepath.Dir(path), budget)
	}
	if err != nil {
		return diskProbe{}, err
	}
	block := st.Mode()&os.ModeDevice != 0
	flags := os.O_RDONLY
	if block {
		flags |= unix.O_EXCL // refused while mounted or held by another program
	}
	in, direct, err := openDirect(path, flags)
	if err != nil {
		if block && errors.Is(err, unix.EBUSY) {
			return diskProbe{}, fmt.Errorf("%s is in use (mounted?): not measured", path)
		}
		return diskProbe{}, err
	}
	defer in.Close()
	var out *os.File
	outDirect := false
	if block && !buffered {
		out, outDirect, err = openDirect(path, os.O_WRONLY)
	} else {
		out, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		return diskProbe{}, err
	}
	defer out.Close()
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		return diskProbe{}, err
	}
	region := min(size/2/probeBlock*probeBlock, 64<<20)
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
	// (which costs far more in a virtual machine).
	behind := (*imaging.WriteBehind)(nil)
	if !outDirect {
		behind = imaging.NewWriteBehind(out)
	}
	buf := imaging.AlignedBuffer(probeBlock)
	var wrote int64
	var spent, cpu time.Duration
	// The write's cost counts the kernel threads' work for it too (a loop
	// device's worker, writeback), but not the reads'.
	kernel := FindKernelThreads()
	pass := func(deadline time.Time, timed bool) error {
		for off := start; off < start+region && time.Now().Before(deadline) && ctx.Err() == nil; off += probeBlock {
			if _, err := in.ReadAt(buf, off); err != nil {
				return fmt.Errorf("reading %s: %w", path, err)
			}
			unix.Fadvise(int(out.Fd()), off, probeBlock, unix.FADV_DONTNEED)
			kernel.Since()
			t, c := time.Now(), ProcessCPU()
			if _, err := out.WriteAt(buf, off); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
			if behind != nil {
				if err := behind.Wrote(off, probeBlock); err != nil {
					return fmt.Errorf("writing %s: %w", path, err)
				}
			}
			if timed {
				spent, cpu = spent+time.Since(t), cpu+ProcessCPU()-c+kernel.Since()
				wrote += probeBlock
			}
		}
		kernel.Since()
		t, c := time.Now(), ProcessCPU()
		if behind != nil {
			if err := behind.Finish(); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
		}
		if err := out.Sync(); err != nil {
			return err
		}
		if timed {
			spent, cpu = spent+time.Since(t), cpu+ProcessCPU()-c+kernel.Since()
		}
		return nil
	}
	if behind != nil {
		if err := pass(time.Now().Add(budget/3), false); err != nil {
			return diskProbe{}, err
		}
	}
	if err := pass(time.Now().Add(budget), true); err != nil {
		return diskProbe{}, err
	}
	how := fmt.Sprintf("rewrote %s of %s in place", units.FormatBytes(wrote), path)
	if outDirect {
		how += " with O_DIRECT"
	}
	if !direct {
		how += " (cached reads)"
	}
	return diskProbe{rate: rate(wrote, spent), cpuRate: rate(wrote, cpu), how: how}, nil
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// probeTempWrite measures a directory's write rate with a temporary file.
func probeTempWrite(ctx context.Context, dir string, budget time.Duration) (diskProbe, error) {
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
	start, c := time.Now(), ProcessCPU()
	for wrote < 64<<20 && time.Since(start) < budget && ctx.Err() == nil {
		if _, err := f.Write(buf); err != nil {
			return diskProbe{}, err
		}
		wrote += probeBlock
	}
	if err := f.Sync(); err != nil {
		return diskProbe{}, err
	}
	return diskProbe{rate: rate(wrote, time.Since(start)), cpuRate: rate(wrote, ProcessCPU()-c+kernel.Since()),
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

// probeNetStream measures what one TCP stream costs the CPU: it sends buf
// repeatedly over loopback to a receiver that splices it away, as a relay
// does, and counts this process's CPU time (other nodes on the machine do
// not count). Loopback does both ends' kernel work in this process, so the
// time, less one copy into the socket, covers two streams (a send and a
// receive).
func probeNetStream(buf []byte, copyRate float64, budget time.Duration) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no loopback: %w", err)
	}
	defer ln.Close()
	received := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- err
			return
		}
		defer c.Close()
		received <- relay.Discard(c.(*net.TCPConn))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	var sent int64
	start, c0 := time.Now(), ProcessCPU()
	for time.Since(start) < budget || sent < 64<<20 {
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			c.Close()
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	if err := <-received; err != nil {
		c.Close()
		return 0, err
	}
	c.Close()
	cpu := (ProcessCPU() - c0).Seconds()
	if copyRate > 0 {
		cpu -= float64(sent) / copyRate
	}
	if cpu <= 0 {
		return 0, errors.New("too fast to measure")
	}
	return 2 * float64(sent) / cpu, nil
}
