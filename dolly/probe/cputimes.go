package probe

import "time"

// CPUTimes is how a machine's CPUs spent their time, all cores together.
type CPUTimes struct {
	Busy  time.Duration // running programs, the kernel, interrupts
	Steal time.Duration // taken by a VM's host while this machine had work
	Idle  time.Duration // idle, or waiting for a disk
}

// Sub is what the CPUs spent between b and t.
func (t CPUTimes) Sub(b CPUTimes) CPUTimes {
	return CPUTimes{Busy: t.Busy - b.Busy, Steal: t.Steal - b.Steal, Idle: t.Idle - b.Idle}
}

// Total is all of the CPUs' time.
func (t CPUTimes) Total() time.Duration { return t.Busy + t.Steal + t.Idle }
