//go:build !linux

package imaging

import "os"

// NewWriteBehind returns nil: writing behind is done on Linux only.
func NewWriteBehind(f *os.File) *WriteBehind { return nil }
