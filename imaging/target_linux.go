package imaging

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// exclusiveOpen claims a block device for this open file alone: the
// kernel then refuses mounts and other exclusive opens until it is closed.
const exclusiveOpen = unix.O_EXCL

// sectorSize is the alignment BLKZEROOUT requires (logical block size).
const sectorSize = 512

type linuxZeroer struct {
	f     *os.File
	block bool
	// fast is cleared after the kernel refuses the fast path once, so a
	// target that cannot punch holes does not pay for the attempt per run.
	fast bool
}

func newZeroer(f *os.File, block bool) zeroer { return &linuxZeroer{f: f, block: block, fast: true} }

func (z *linuxZeroer) zeroRange(off, n int64) error {
	if !z.fast {
		return writeZeros(z.f, off, n)
	}
	if z.block {
		return z.blockZero(off, n)
	}
	err := unix.Fallocate(int(z.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		z.fast = false
		return writeZeros(z.f, off, n)
	}
	return err
}

// blockZero asks the device to zero the sector-aligned middle of the range
// and writes the unaligned edges itself.
func (z *linuxZeroer) blockZero(off, n int64) error {
	start := (off + sectorSize - 1) / sectorSize * sectorSize
	end := (off + n) / sectorSize * sectorSize
	if end <= start {
		return writeZeros(z.f, off, n)
	}
	if start > off {
		if err := writeZeros(z.f, off, start-off); err != nil {
			return err
		}
	}
	r := [2]uint64{uint64(start), uint64(end - start)}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, z.f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r)))
	switch {
	case errno == 0:
	case errno == unix.EOPNOTSUPP || errno == unix.ENOTTY || errno == unix.EINVAL || errno == unix.EBUSY:
		// EBUSY: the device is claimed (a file system still mounted on
		// it, written over with -force); plain writes still go through.
		z.fast = false
		if err := writeZeros(z.f, start, end-start); err != nil {
			return err
		}
	default:
		return errno
	}
	if off+n > end {
		return writeZeros(z.f, end, off+n-end)
	}
	return nil
}

// discard gives up [off, off+n), which the caller has aligned to whole
// pages: BLKDISCARD on a block device, a punched hole in a file. It
// reports false, not an error, when the target cannot: the range is then
// left as it is.
func discard(f *os.File, block bool, off, n int64) (bool, error) {
	if !block {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return err == nil, err
	}
	r := [2]uint64{uint64(off), uint64(n)}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKDISCARD, uintptr(unsafe.Pointer(&r)))
	switch errno {
	case 0:
		return true, nil
	case unix.EOPNOTSUPP, unix.ENOTTY, unix.EINVAL, unix.EBUSY, unix.EPERM:
		// EPERM: a read-only or secure-erase-only device; EBUSY: claimed
		// by a file system mounted on it (-force).
		return false, nil
	}
	return false, errno
}

// cachedLoop returns the file behind the loop device at path if the device
// writes through that file's page cache (no direct I/O), else "".
func cachedLoop(path string) string {
	dev, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	name := filepath.Base(dev)
	if !strings.HasPrefix(name, "loop") {
		return ""
	}
	dio, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "dio"))
	if err != nil || strings.TrimSpace(string(dio)) != "0" {
		return ""
	}
	backing, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(backing))
}
