//go:build !linux

package probe

import (
	"context"
	"errors"
	"time"
)

var errProbeUnsupported = errors.New("not measured on this operating system")

func probeTargetWrite(context.Context, string, time.Duration, bool) (diskProbe, error) {
	return diskProbe{}, errProbeUnsupported
}

func probeRead(context.Context, string, time.Duration) (float64, error) {
	return 0, errProbeUnsupported
}

func streamCost([]byte, time.Duration) (float64, error) { return 0, errProbeUnsupported }

func relayCost(context.Context, []byte, time.Duration) (float64, error) {
	return 0, errProbeUnsupported
}
