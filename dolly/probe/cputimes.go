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

// A MachineSpan is a stretch of time on this machine's clock, with the
// machine's busy time since boot (see MachineCPU) at each end. Spans that
// nodes of one machine timed on its one clock compare with each other:
// the machine's cost over the part they share is the busy time between
// the latest start and the earliest end.
type MachineSpan struct {
	From, To         time.Time
	BusyFrom, BusyTo time.Duration
}
