package imaging

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"dolly/internal/units"
)

// TargetInfo describes a target before anything is written to it.
type TargetInfo struct {
	Path   string
	Size   int64 // capacity in bytes; 0 for a file dolly will create
	Block  bool  // a block device rather than a regular file
	Exists bool
	// CachedBy is, for a loop device without direct I/O, the file behind
	// it: what is written to the device fills that file's page cache
	// first, whatever the writer asked for.
	CachedBy string
}

// InspectTarget looks at a target without changing it: it must be a block
// device or a regular file that dolly can read and write, or a missing file
// in a directory dolly can write (it is created when the cast starts).
func InspectTarget(path string) (TargetInfo, error) {
	info := TargetInfo{Path: path}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(path)
		if dst, derr := os.Stat(dir); derr != nil || !dst.IsDir() {
			return info, fmt.Errorf("target %s does not exist and neither does its directory %s", path, dir)
		}
		if werr := checkWritableDir(dir); werr != nil {
			return info, fmt.Errorf("target %s does not exist and cannot be created: %w", path, werr)
		}
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("target %s: %w", path, err)
	}
	info.Exists = true
	switch {
	case st.Mode().IsRegular():
		info.Size = st.Size()
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		info.Block = true
		info.CachedBy = cachedLoop(path)
	default:
		return info, fmt.Errorf("target %s is a %s, not a block device or a regular file", path, describeMode(st.Mode()))
	}
	// Opening for reading and writing proves access without changing a byte.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return info, fmt.Errorf("target %s cannot be opened for writing: %w", path, err)
	}
	defer f.Close()
	if info.Block {
		size, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			return info, fmt.Errorf("target %s: reading its size: %w", path, err)
		}
		info.Size = size
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], 0); err != nil && err != io.EOF {
		return info, fmt.Errorf("target %s is not readable: %w", path, err)
	}
	return info, nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return m.Type().String()
}

func checkWritableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".dolly-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// CheckTarget inspects a target and refuses it when it cannot hold need
// bytes. The error names both sizes and the fix.
func CheckTarget(path string, need int64) (TargetInfo, error) {
	info, err := InspectTarget(path)
	if err != nil {
		return info, err
	}
	if info.Exists && info.Size < need {
		hint := "pick a larger partition or disk"
		if !info.Block {
			hint = "pick a larger target, or remove the file so dolly creates it"
		}
		have, want := units.FormatBytes(info.Size), units.FormatBytes(need)
		if have == want {
			have, want = fmt.Sprintf("%d bytes", info.Size), fmt.Sprintf("%d bytes", need)
		}
		return info, fmt.Errorf("target %s is %s, image needs %s: %s", path, have, want, hint)
	}
	return info, nil
}

// Target is an open target that an image is being written to. Writes are
// refused beyond the image length so a bad stream can never spill over.
type Target struct {
	Path   string
	f      *os.File
	block  bool
	limit  int64
	zero   zeroer
	direct *directWriter // nil: writes go through the page cache
	behind *WriteBehind  // set when they do and are written behind
	// noDiscard is set once the target refuses a discard: free ranges
	// are left as they are from then on.
	noDiscard atomic.Bool
	discarded atomic.Int64 // bytes given up by Discard
	left      atomic.Int64 // bytes Discard left as they were
}

// OpenTarget checks the target again and opens it for writing an image of
// size bytes. A missing regular file is created and sized; an existing one
// keeps its size (bytes beyond the image stay as they were).
func OpenTarget(path string, size int64, opts TargetOptions) (*Target, error) {
	info, err := CheckTarget(path, size)
	if err != nil {
		return nil, err
	}
	flags := os.O_RDWR
	switch {
	case !info.Exists:
		flags |= os.O_CREATE | os.O_EXCL
	case info.Block && !opts.Shared:
		// Checked again now, not only when the node joined, and claimed
		// until the target is closed: nothing mounts it or claims it
		// while the image is written.
		if err := CheckTargetUse(path); err != nil {
			return nil, err
		}
		flags |= exclusiveOpen
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	if !info.Exists {
		if err := f.Truncate(size); err != nil {
			f.Close()
			os.Remove(path)
			return nil, fmt.Errorf("target %s: sizing to %s: %w", path, units.FormatBytes(size), err)
		}
	}
	t := &Target{Path: path, f: f, block: info.Block, limit: size}
	t.zero = newZeroer(f, info.Block)
	if info.Block && opts.Direct {
		if d := openDirect(path); d != nil {
			t.direct = newDirectWriter(d, f)
		}
	}
	if t.direct == nil {
		t.behind = NewWriteBehind(f)
	}
	return t, nil
}

// TargetOptions are how a target is written.
type TargetOptions struct {
	// Direct writes a block device with O_DIRECT, past the page cache.
	Direct bool
	// Shared opens a block device without claiming it exclusively (and
	// without checking its use again): for dolly -force, on a device
	// someone else holds.
	Shared bool
}

// Direct reports whether writes bypass the page cache.
func (t *Target) Direct() bool { return t.direct != nil && t.direct.isDirect() }

// Size is the number of image bytes the target accepts.
func (t *Target) Size() int64 { return t.limit }

// WriteAt writes p at image offset off.
func (t *Target) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > t.limit {
		return 0, fmt.Errorf("target %s: write of %d bytes at offset %d is beyond the image length %d", t.Path, len(p), off, t.limit)
	}
	if t.direct != nil {
		// The error may be an earlier chunk's or zeroing's, written
		// behind: it names its own offset.
		if err := t.direct.writeAt(p, off); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	n, err := t.f.WriteAt(p, off)
	if err != nil {
		return n, fmt.Errorf("target %s: writing at offset %d: %w", t.Path, off, unwrapPathError(err))
	}
	if t.behind != nil {
		if err := t.behind.Wrote(off, int64(n)); err != nil {
			return n, fmt.Errorf("target %s: writing behind offset %d: %w", t.Path, off, err)
		}
	}
	return n, nil
}

// LendBuffer lends a buffer to decode into (BufferLender), or nil when
// the target is written through the page cache.
func (t *Target) LendBuffer() []byte {
	if t.direct == nil {
		return nil
	}
	return t.direct.LendBuffer()
}

// ReturnBuffer takes back the buffer LendBuffer lent.
func (t *Target) ReturnBuffer(b []byte) {
	if t.direct != nil {
		t.direct.ReturnBuffer(b)
	}
}

// flush writes what the direct writer still holds.
func (t *Target) flush() error {
	if t.direct == nil {
		return nil
	}
	return t.direct.flush() // its errors name the target and offset
}

// ZeroRange makes [off, off+n) read back as zeros, by the cheapest means the
// target supports: BLKZEROOUT on block devices, punching a hole in files,
// explicit zeroes otherwise.
func (t *Target) ZeroRange(off, n int64) error {
	if off < 0 || n < 0 || off+n > t.limit {
		return fmt.Errorf("target %s: zeroing %d bytes at offset %d is beyond the image length %d", t.Path, n, off, t.limit)
	}
	if n == 0 {
		return nil
	}
	zero := func() error {
		if err := t.zero.zeroRange(off, n); err != nil {
			return fmt.Errorf("target %s: zeroing %d bytes at offset %d: %w", t.Path, n, off, unwrapPathError(err))
		}
		return nil
	}
	if t.direct != nil {
		// In order behind the writes queued before it; a failure is
		// reported by a later call, at the latest by Sync.
		return t.direct.zero(zero)
	}
	return zero()
}

// Discard gives up [off, off+n), which need not read back as anything in
// particular: the device is told it may drop those blocks (BLKDISCARD; a
// punched hole in a file) where it can, and else they are left as they
// are. Only the whole pages of the range are discarded.
func (t *Target) Discard(off, n int64) error {
	if off < 0 || n < 0 || off+n > t.limit {
		return fmt.Errorf("target %s: discarding %d bytes at offset %d is beyond the image length %d", t.Path, n, off, t.limit)
	}
	start := (off + ZeroBlock - 1) / ZeroBlock * ZeroBlock
	end := (off + n) / ZeroBlock * ZeroBlock
	if end <= start || t.noDiscard.Load() {
		t.left.Add(n)
		return nil
	}
	t.left.Add(n - (end - start))
	give := func() error {
		// Best effort: a device that fails a discard (a flaky bridge, a
		// read-only path to it) keeps the range as it was, and is not
		// asked again. Nothing in use depends on it.
		if ok, err := discard(t.f, t.block, start, end-start); !ok || err != nil {
			t.noDiscard.Store(true)
			t.left.Add(end - start)
			return nil
		}
		t.discarded.Add(end - start)
		return nil
	}
	if t.direct != nil {
		return t.direct.zero(give) // in order behind the writes before it
	}
	return give()
}

// Disk is the whole target, past the image's length too, and its size:
// for fitting a whole disk's partition table to it once the image is
// written. What was queued is written first.
func (t *Target) Disk() (*os.File, int64, error) {
	if err := t.flush(); err != nil {
		return nil, 0, err
	}
	size, err := t.f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, 0, fmt.Errorf("target %s: reading its size: %w", t.Path, err)
	}
	return t.f, size, nil
}

// Freed reports how many bytes Discard gave up and how many it left as
// they were.
func (t *Target) Freed() (discarded, left int64) { return t.discarded.Load(), t.left.Load() }

// ReadAt reads back what the target holds, for verification.
func (t *Target) ReadAt(p []byte, off int64) (int, error) {
	if err := t.flush(); err != nil {
		return 0, err
	}
	return t.f.ReadAt(p, off)
}

// Sync flushes written data to stable storage.
func (t *Target) Sync() error {
	if err := t.flush(); err != nil {
		return err
	}
	if t.behind != nil {
		if err := t.behind.Finish(); err != nil {
			return fmt.Errorf("target %s: flushing to disk: %w", t.Path, err)
		}
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("target %s: flushing to disk: %w", t.Path, unwrapPathError(err))
	}
	return nil
}

// Close writes what is still pending and closes the target; Sync first
// to know the image is on the disk.
func (t *Target) Close() error {
	err := t.flush()
	if t.direct != nil {
		t.direct.close()
	}
	return errors.Join(err, t.f.Close())
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// zeroer zeroes ranges of an open target.
type zeroer interface {
	zeroRange(off, n int64) error
}

// writeZeros is the portable way: write zero bytes.
func writeZeros(f *os.File, off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroPage)))
		if _, err := f.WriteAt(zeroPage[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}
