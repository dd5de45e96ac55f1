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
// cores, kernel threads included, and what a VM's host took of them), from
// /proc/stat. Much of a write's or a relay's cost lies in kernel threads
// (writeback, a loop device's worker, softirqs) that no process's own CPU
// time shows.
func MachineCPU() time.Duration {
	t := ReadCPUTimes()
	return t.Busy + t.Steal
}

// ReadCPUTimes reads how the machine's CPUs have spent their time since
// boot, from /proc/stat; zero where it cannot.
func ReadCPUTimes() CPUTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPUTimes(line)
}

// parseCPUTimes reads /proc/stat's first line: "cpu" and the time all
// CPUs spent in user, nice, system, idle, iowait, irq, softirq, steal,
// guest and guest_nice, in clock ticks (guest time is in user already).
func parseCPUTimes(line string) CPUTimes {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUTimes{}
	}
	const userHZ = 100 // the unit of /proc/stat on every Linux architecture dolly builds for
	var t CPUTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return CPUTimes{}
		}
		d := time.Duration(n) * time.Second / userHZ
		switch i {
		case 0, 1, 2, 5, 6: // user, nice, system, irq, softirq
			t.Busy += d
		case 3, 4: // idle, iowait
			t.Idle += d
		case 7:
			t.Steal += d
		}
	}
	return t
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
