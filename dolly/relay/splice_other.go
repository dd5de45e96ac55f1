//go:build !linux

package relay

import (
	"errors"
	"os"
	"time"
)

const spliceSupported = false

// Without splice the relay copies; these are never reached.

type rawPipe struct{ r, w int }

func (rawPipe) close() {}

type spliceState struct{}

func newSpliceState(time.Duration) (*spliceState, error) {
	return nil, errors.New("no splice here")
}
func (*spliceState) close()                        {}
func (*spliceState) childPipe() (rawPipe, error)   { return rawPipe{}, errors.New("no splice here") }
func (r *Relay) spliceRound(Upstream) (int, error) { return 0, errors.New("no splice here") }
func (r *Relay) distributeSplice(int) error        { return errors.New("no splice here") }
func (r *Relay) sendSplice(*relayChild, childJob) error {
	return errors.New("no splice here")
}
func drain(int) {}

func punchHole(*os.File, int64) {}

func freeSpace(*os.File) int64 { return 0 }
