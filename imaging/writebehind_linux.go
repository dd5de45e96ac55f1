package imaging

import (
	"os"

	"golang.org/x/sys/unix"
)

// cacheDisk writes behind with sync_file_range(2) and drops with
// fadvise(2).
type cacheDisk struct{ f *os.File }

func (d cacheDisk) start(s span) error {
	return unix.SyncFileRange(int(d.f.Fd()), s.off, s.n, unix.SYNC_FILE_RANGE_WRITE)
}

func (d cacheDisk) drop(s span) error {
	const wait = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	if err := unix.SyncFileRange(int(d.f.Fd()), s.off, s.n, wait); err != nil {
		return err
	}
	return unix.Fadvise(int(d.f.Fd()), s.off, s.n, unix.FADV_DONTNEED)
}

// NewWriteBehind writes f behind, or returns nil where the kernel cannot.
func NewWriteBehind(f *os.File) *WriteBehind {
	if err := unix.SyncFileRange(int(f.Fd()), 0, 1, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return nil // not on this file system: the cache works as usual
	}
	return &WriteBehind{disk: cacheDisk{f}}
}
