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

func readCost(context.Context, string, time.Duration) (float64, error) {
	return 0, errProbeUnsupported
}

func streamCost([]byte, time.Duration) (float64, error) { return 0, errProbeUnsupported }

func feedCost(context.Context, []byte, []byte, time.Duration) (float64, error) {
	return 0, errProbeUnsupported
}

func relayCost(context.Context, []byte, []byte, time.Duration) (float64, error) {
	return 0, errProbeUnsupported
}

// A Crowd is this node's data path, ready to push (Linux only).
type Crowd struct{}

func startCrowd(context.Context, []byte, []byte) (*Crowd, error) { return nil, errProbeUnsupported }

func (*Crowd) PushFor(time.Duration, time.Duration) (int64, time.Duration, error) {
	return 0, 0, errProbeUnsupported
}

func (*Crowd) Close() {}

// A DiskCrowd is this node's write path, ready to write (Linux only).
type DiskCrowd struct{}

func StartDiskCrowd(string, bool, []byte) (*DiskCrowd, error) { return nil, errProbeUnsupported }

func (*DiskCrowd) PushFor(time.Duration, time.Duration) (int64, time.Duration, error) {
	return 0, 0, errProbeUnsupported
}

func (*DiskCrowd) Close() {}

// Window is unknown here.
func (*DiskCrowd) Window() MachineSpan { return MachineSpan{} }

func zeroesByWriting(string, string) bool { return false }
