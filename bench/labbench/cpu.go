package main

import (
	"errors"
	"time"

	"dolly/dolly/probe"
)

// cpuSamples are the machine's busy time at moments.
type cpuSamples struct {
	at   []time.Time
	busy []time.Duration
}

// traceCPU samples the machine's busy time every interval until the
// returned function is called, which returns the samples.
func traceCPU(every time.Duration) func() cpuSamples {
	var s cpuSamples
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.at, s.busy = append(s.at, time.Now()), append(s.busy, probe.MachineCPU())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() cpuSamples {
		close(stop)
		<-done
		return s
	}
}

// cores is how many cores were busy on average from a to b.
func (s cpuSamples) cores(a, b time.Time) (float64, error) {
	i, j := -1, -1
	for k, t := range s.at {
		if i < 0 && !t.Before(a) {
			i = k
		}
		if !t.After(b) {
			j = k
		}
	}
	if i < 0 || j <= i {
		return 0, errors.New("too short to sample")
	}
	return (s.busy[j] - s.busy[i]).Seconds() / s.at[j].Sub(s.at[i]).Seconds(), nil
}
