package imaging

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// onOneThread runs f locked to one OS thread; cpu tells that thread's CPU
// time, so f can time work that runs in its own goroutine.
func onOneThread(f func(cpu func() time.Duration)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f(threadCPU)
}

func threadCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
