//go:build !linux

package imaging

import (
	"errors"
	"os"
)

var errDirectRefused = errors.New("direct writes are not supported")

// openDirect returns nil: direct writes are used on Linux only.
func openDirect(path string) *os.File { return nil }
