package probe

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// OnOneThread runs f locked to one OS thread; cpu tells that thread's CPU
// time, so f can time work that runs in its own goroutine.
func OnOneThread(f func(cpu func() time.Duration)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f(threadCPU)
}

// threadCPU reads the scheduler's own count of the thread's run time.
// getrusage(RUSAGE_THREAD) would not do: it splits that count by tick
// samples and holds its parts from going back, so over a few milliseconds
// it is off by whole ticks.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// MachineCPU is the time the whole machine's CPUs have been busy (all
// cores, kernel threads included), from /proc/stat. Much of a write's or a
// relay's cost lies in kernel threads (writeback, a loop device's worker,
// softirqs) that no process's own CPU time shows.
func MachineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, v := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	const userHZ = 100 // the unit of /proc/stat on every Linux architecture dolly builds for
	return time.Duration(busy) * time.Second / userHZ
}

// ProcessCPU is this process's own CPU time, user and system: what its
// threads cost, including the kernel's work done on their behalf, and not
// what other processes on the machine (other nodes on a shared host) cost.
func ProcessCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
