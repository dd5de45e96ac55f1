package imaging

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// nextData asks the file system with SEEK_DATA and SEEK_HOLE. lseek moves
// the file's offset, which no reader of the image uses: they all read at
// an offset of their own (pread).
func nextData(f *os.File, off, size int64) (data, hole int64, ok bool) {
	if off >= size {
		return size, size, true
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		data, serr = unix.Seek(int(fd), off, unix.SEEK_DATA)
		if errors.Is(serr, unix.ENXIO) { // nothing stored after off
			data, hole, serr = size, size, nil
			return
		}
		if serr == nil {
			hole, serr = unix.Seek(int(fd), data, unix.SEEK_HOLE)
		}
	})
	if err != nil || serr != nil {
		return 0, 0, false
	}
	return min(data, size), min(hole, size), true
}
