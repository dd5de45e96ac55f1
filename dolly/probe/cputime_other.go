//go:build !linux

package probe

import "time"

// OnOneThread runs f; without a per-thread clock, cpu reports nothing.
func OnOneThread(f func(cpu func() time.Duration)) { f(func() time.Duration { return 0 }) }

// MachineCPU reports nothing where there is no /proc/stat.
func MachineCPU() time.Duration { return 0 }

// ReadCPUTimes reports nothing where there is no /proc/stat.
func ReadCPUTimes() CPUTimes { return CPUTimes{} }

// ProcessCPU reports nothing here.
func ProcessCPU() time.Duration { return 0 }

// KernelThreads reports nothing here.
type KernelThreads struct{}

// FindKernelThreads finds none here.
func FindKernelThreads() *KernelThreads { return &KernelThreads{} }

// Since reports nothing here.
func (*KernelThreads) Since() time.Duration { return 0 }
