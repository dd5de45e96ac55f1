//go:build !linux

package imaging

import "os"

// exclusiveOpen: only Linux claims block devices this way.
const exclusiveOpen = 0

type portableZeroer struct{ f *os.File }

func newZeroer(f *os.File, block bool) zeroer { return portableZeroer{f} }

func (z portableZeroer) zeroRange(off, n int64) error { return writeZeros(z.f, off, n) }

// discard is not done off Linux: free ranges are left as they are.
func discard(f *os.File, block bool, off, n int64) (bool, error) { return false, nil }

// cachedLoop: only Linux has loop devices this looks at.
func cachedLoop(path string) string { return "" }
