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

// KernelThreads is the machine's kernel threads, found once: a write's
// cost lies partly in them (a loop device's worker, writeback, block
// completion), where the writer's own CPU time does not show it.
type KernelThreads struct {
	schedstat []string
	ran       []time.Duration // by each when last read
}

// FindKernelThreads lists the kernel threads running now (kthreadd and its
// children) and reads their run time so far.
func FindKernelThreads() *KernelThreads {
	k := &KernelThreads{}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return k
	}
	for _, d := range dirs {
		pid := d.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		// The name, in brackets, may hold spaces: the fields after it count.
		_, rest, ok := strings.Cut(string(b), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 2 {
			continue
		}
		if pid == "2" || fields[1] == "2" {
			k.schedstat = append(k.schedstat, "/proc/"+pid+"/schedstat")
		}
	}
	k.ran = make([]time.Duration, len(k.schedstat))
	k.Since()
	return k
}

// Since is the time the kernel threads have run since the last call, from
// the scheduler's own count (nanoseconds), so that a write of a few
// milliseconds shows. A thread that has gone since counts nothing.
func (k *KernelThreads) Since() time.Duration {
	var sum time.Duration
	for i, f := range k.schedstat {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		field, _, _ := strings.Cut(string(b), " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			continue
		}
		if ran := time.Duration(n); ran >= k.ran[i] {
			sum += ran - k.ran[i]
			k.ran[i] = ran
		}
	}
	return sum
}
