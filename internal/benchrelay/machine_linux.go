package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc's CPU times: fixed at 100 on Linux.
const userHZ = 100

func ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// processCPU is the user and system time pid has taken so far.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing one. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	return ticks(u + s), nil
}

// blockTarget is what every relay writes: a loop device, as a lab node
// writes its disk, over a file in memory that is allocated once, so that
// every run writes the same pages (fresh pages cost a first touch, more
// on some virtual machines, that no relay is to blame for). With direct
// I/O the loop device moves what it is given straight to the file.
func blockTarget(dir string, size int64) (dev string, detach func(), err error) {
	back := dir + "/target.img"
	f, err := os.OpenFile(back, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", nil, err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	f.Close()
	if err != nil {
		return "", nil, fmt.Errorf("allocating %s: %w", back, err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", back).CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("losetup: %v: %s", err, bytes.TrimSpace(out))
	}
	dev = strings.TrimSpace(string(out))
	return dev, func() {
		exec.Command("losetup", "--detach", dev).Run()
		os.Remove(back)
	}, nil
}

// poison writes random bytes into the first page of every MiB of dev, so
// that a relay that leaves any of them unwritten fails the comparison with
// the image, whatever an earlier run left there.
func poison(dev string, size int64) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	page := make([]byte, 4096)
	for off := int64(0); off < size; off += 1 << 20 {
		rand.Read(page)
		if _, err := f.WriteAt(page[:min(int64(len(page)), size-off)], off); err != nil {
			return fmt.Errorf("poisoning %s: %w", dev, err)
		}
	}
	return f.Sync()
}

// syncDevice writes back what dev holds in the page cache: a relay that
// writes through it leaves that work to the kernel, which counts.
func syncDevice(dev string) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
