package probe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"dolly/imaging"
)

// A DiskCrowd is this node's write path to its target, set up and ready to
// write when told. Nodes whose targets share one disk (files on one file
// system, loop devices over them) each measure it alone as one writer,
// which keeps a shallow queue; in a cast they all write at once, and the
// disk serves them together, often faster in all than one writer alone
// and sometimes far slower. What reaches the disk from all of them over
// one window is what the disk takes from the cast.
//
// It rewrites a region of the target with the bytes it holds, read when
// it is set up, over and over, the way the cast writes (O_DIRECT to a
// block device unless buffered, through the page cache and written behind
// otherwise): no byte of the target changes. A sparse file (the demo's
// targets, a VM's disk image) is written where a cast writes it, in a
// hole, which the file system must allocate block by block: zeros, as the
// hole reads, each push on from where the last stopped (see holeIn).
type DiskCrowd struct {
	out    *os.File
	direct bool // O_DIRECT: a write is on the disk when it returns
	buf    []byte
	start  int64
	// fresh is the length of the hole written instead of the region, if
	// any; next is where in it the next push starts.
	fresh, next int64
	onDisk      atomic.Int64
	// window is PushFor's window, on this machine's clock.
	window MachineSpan
}

// diskCrowdRegion is what a disk crowd rewrites, per node, and holds in
// memory; diskCrowdLag is what it may have on its way to the disk through
// the page cache, as a cast writing behind does (see imaging.WriteBehind).
// Through the page cache the region must hold the lag, or the writer would
// wait for its own blocks; an O_DIRECT write is on the disk when it
// returns, and half the region is half the reading that sets it up (a
// tenth of a second of the join, 24 nodes on one disk).
const diskCrowdRegion, diskCrowdDirectRegion, diskCrowdLag = 16 << 20, 8 << 20, 16 << 20

// StartDiskCrowd reads the region of the target at path that it will
// rewrite (or finds the hole it will write in), and opens it for writing.
// A block device that is mounted or held by another program is refused.
// The region is read into mem where it fits (see StartCrowd), else into
// memory of its own.
func StartDiskCrowd(path string, buffered bool, mem []byte) (_ *DiskCrowd, err error) {
	t, err := openTarget(path, buffered)
	if err != nil {
		return nil, err
	}
	defer t.in.Close()
	defer func() {
		if err != nil {
			t.out.Close()
		}
	}()
	size, err := t.in.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	region := min(size/2/probeBlock*probeBlock, diskCrowdRegion)
	if t.outDirect {
		region = min(region, diskCrowdDirectRegion)
	}
	if region < probeBlock {
		return nil, fmt.Errorf("%s is too small to measure", path)
	}
	buf := imaging.AlignIn(mem, int(region))
	if buf == nil {
		buf = imaging.AlignedBuffer(int(region))
	}
	c := &DiskCrowd{out: t.out, direct: t.outDirect, buf: buf, start: (size/2)/probeBlock*probeBlock - region/2}
	if st, err := t.out.Stat(); err == nil && st.Mode().IsRegular() && !c.direct {
		if start, length := holeIn(int(t.out.Fd()), size); length > 0 {
			c.start, c.fresh, c.buf = start, length, c.buf[:probeBlock]
			clear(c.buf) // what the hole reads
		}
	}
	for b := int64(0); c.fresh == 0 && b < region; b += probeBlock {
		if _, err := t.in.ReadAt(c.buf[b:b+probeBlock], c.start+b); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	// What is still dirty of the target is flushed before the count.
	if err := c.out.Sync(); err != nil {
		return nil, err
	}
	if !c.direct {
		if err := unix.SyncFileRange(int(c.out.Fd()), c.start, 1, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			return nil, fmt.Errorf("%s: this file system cannot write behind: not measured", path)
		}
		unix.Fadvise(int(c.out.Fd()), c.start, region, unix.FADV_DONTNEED)
	}
	return c, nil
}

// PushFor writes without a pause, and counts what reaches the disk over
// window from settle on: the time every node of the machine takes to fill
// its write-behind, writing to the page cache faster than the disk
// empties it, at the cost of copies few bytes on the disk show (24 nodes
// on one disk of 1.4 GB/s need a quarter of a second to fill theirs).
// Every node of the machine, told at about the same moment, counts over
// about the same window: one that waited for its own write-behind to
// fill opened its window up to half a second after another's, and each
// counted a disk shared among fewer writers. It returns the bytes
// counted and the time they took, once all it wrote is on the disk.
//
// It may be called again: each push starts with an empty write-behind.
func (c *DiskCrowd) PushFor(settle, window time.Duration) (int64, time.Duration, error) {
	c.window = MachineSpan{}
	var stop atomic.Bool
	wrote := make(chan error, 1)
	go func() { wrote <- c.write(&stop) }()
	halt := func() error {
		stop.Store(true)
		return <-wrote
	}
	select {
	case err := <-wrote:
		return 0, 0, err
	case <-time.After(settle):
	}
	d0, t0, m0 := c.onDisk.Load(), time.Now(), MachineCPU()
	select {
	case err := <-wrote:
		return 0, 0, err
	case <-time.After(window):
	}
	d1, t1, m1 := c.onDisk.Load(), time.Now(), MachineCPU()
	took := t1.Sub(t0)
	if m0 > 0 && m1 > m0 {
		c.window = MachineSpan{From: t0, To: t1, BusyFrom: m0, BusyTo: m1}
	}
	if err := halt(); err != nil {
		return 0, 0, err
	}
	return d1 - d0, took, nil
}

// minHole and maxHole bound the hole of a sparse file a disk crowd writes
// in: more than the write-behind's lag, and what a node of a fast disk
// shared by few writes in two pushes. Past its end it writes the hole
// again from the start, blocks it allocated already. What it wrote stays
// allocated, zeros as before: punching it back cost each push of the
// demo's 24 nodes 0.1-0.3 s of the join, and the cast writes or discards
// those blocks anyway, as the one writer's probe leaves its own.
const minHole, maxHole = 2 * diskCrowdLag, 512 << 20

// holeIn finds a hole of the file fd (of size bytes) that a disk crowd
// may write in: the first at least minHole long from the middle of the
// file on, else from its start. It returns its start and length, block
// aligned and at most maxHole, or a 32nd of the file system's free space
// (every node of a machine writes its own at once); length 0 if there is
// none.
func holeIn(fd int, size int64) (start, length int64) {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil {
		return 0, 0
	}
	most := min(maxHole, int64(fs.Bavail)*int64(fs.Bsize)/32/probeBlock*probeBlock)
	for _, from := range []int64{size / 2, 0} {
		for off := from; off < size; {
			hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
			if err != nil || hole >= size {
				break
			}
			end, err := unix.Seek(fd, hole, unix.SEEK_DATA)
			if err != nil {
				end = size // ENXIO: a hole up to the end
			}
			start = (hole + probeBlock - 1) / probeBlock * probeBlock
			if length = min(end/probeBlock*probeBlock-start, most); length >= minHole {
				return start, length
			}
			if end <= off {
				break
			}
			off = end
		}
	}
	return 0, 0
}

// Window is PushFor's window on this machine's clock, with the whole
// machine's busy time at each end, all cores and kernel threads
// (writeback, a loop device's worker): with every node of the machine
// writing, what their writes cost it; zero if unknown. One writer's probe
// times its own writes on an idle machine, and 24 writers to files on one
// disk may cost it more per byte.
func (c *DiskCrowd) Window() MachineSpan { return c.window }

// write rewrites the region, block by block and round and round, until
// told to stop. Through the page cache each block is handed to the disk as
// soon as it is written, and counted once the disk has it: a second
// goroutine waits for the blocks in order, while the writer goes on until
// diskCrowdLag is on its way. Counting when the writer would wait, as a
// cast does, would count nothing until the lag is full.
func (c *DiskCrowd) write(stop *atomic.Bool) error {
	fd := int(c.out.Fd())
	var flight chan int64 // offsets handed to the disk, oldest first
	waited := make(chan error, 1)
	if !c.direct {
		flight = make(chan int64, diskCrowdLag/probeBlock)
		go func() {
			const wait = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			var err error
			for off := range flight {
				if err == nil {
					err = unix.SyncFileRange(fd, off, probeBlock, wait)
				}
				if err == nil {
					unix.Fadvise(fd, off, probeBlock, unix.FADV_DONTNEED)
					c.onDisk.Add(probeBlock)
				}
			}
			waited <- err
		}()
	}
	err := c.rewrite(stop, flight)
	if flight == nil {
		return err
	}
	close(flight)
	return errors.Join(err, <-waited)
}

// rewrite writes the blocks of the region (or of the hole) in turn,
// handing each to the disk through flight (nil: O_DIRECT, on the disk once
// written).
func (c *DiskCrowd) rewrite(stop *atomic.Bool, flight chan<- int64) error {
	fd := int(c.out.Fd())
	region, fresh, off := int64(len(c.buf)), c.fresh > 0, int64(0)
	if fresh {
		region, off = c.fresh, c.next
		defer func() { c.next = off }()
	}
	for ; !stop.Load(); off = (off + probeBlock) % region {
		block := c.buf[:probeBlock]
		if !fresh {
			block = c.buf[off : off+probeBlock]
		}
		if _, err := c.out.WriteAt(block, c.start+off); err != nil {
			return fmt.Errorf("writing %s: %w", c.out.Name(), err)
		}
		if flight == nil {
			c.onDisk.Add(probeBlock)
			continue
		}
		if err := unix.SyncFileRange(fd, c.start+off, probeBlock, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			return fmt.Errorf("writing %s: %w", c.out.Name(), err)
		}
		flight <- c.start + off
	}
	return nil
}

// Close closes the target: what was written is on the disk by then, since
// PushFor waits for it.
func (c *DiskCrowd) Close() {
	c.out.Close()
}
