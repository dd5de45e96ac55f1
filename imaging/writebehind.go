package imaging

// A target written through the page cache (a file, or a block device with
// -buffered) is written behind: every few megabytes the node starts the
// disk on what it just wrote, and once the disk has it, drops those pages
// from the cache. The node then holds little dirty data at any time and
// runs at its disk's pace, as with O_DIRECT: a cast neither fills the
// machine's memory with an image nobody reads back, nor leaves gigabytes
// to flush at the end, nor pays for fresh cache pages all along (the
// dropped ones are handed out again).

const (
	// behindWindow is how much is written before the disk is started on it.
	behindWindow = 8 << 20
	// behindLag is how much may be on its way to the disk before the
	// writer waits for the oldest of it.
	behindLag = 32 << 20
)

// span is a range of a target's bytes.
type span struct{ off, n int64 }

// WriteBehind tracks what a target's writes left in the cache.
type WriteBehind struct {
	disk    behindDisk
	open    span   // written, not yet handed to the disk
	started []span // handed to the disk, oldest first
	queued  int64  // bytes in started
}

// behindDisk is what writing behind asks of the kernel.
type behindDisk interface {
	start(s span) error // start writing s to the disk
	drop(s span) error  // wait until s is on the disk, then drop it from the cache
}

// Wrote records that [off, off+n) was written.
func (w *WriteBehind) Wrote(off, n int64) error {
	if n <= 0 {
		return nil
	}
	if w.open.n > 0 && off != w.open.off+w.open.n {
		if err := w.hand(); err != nil {
			return err
		}
	}
	if w.open.n == 0 {
		w.open.off = off
	}
	w.open.n += n
	if w.open.n < behindWindow {
		return nil
	}
	return w.hand()
}

// hand starts the disk on the open span, and drops the oldest spans
// while too much is on its way.
func (w *WriteBehind) hand() error {
	if w.open.n == 0 {
		return nil
	}
	if err := w.disk.start(w.open); err != nil {
		return err
	}
	w.started = append(w.started, w.open)
	w.queued += w.open.n
	w.open = span{}
	for w.queued > behindLag {
		s := w.started[0]
		if err := w.disk.drop(s); err != nil {
			return err
		}
		w.started = w.started[1:]
		w.queued -= s.n
	}
	return nil
}

// Finish waits for everything written to reach the disk and drops it.
func (w *WriteBehind) Finish() error {
	if err := w.hand(); err != nil {
		return err
	}
	for _, s := range w.started {
		if err := w.disk.drop(s); err != nil {
			return err
		}
	}
	w.started, w.queued = nil, 0
	return nil
}
