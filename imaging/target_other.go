//go:build !linux

package imaging

import "os"

type portableZeroer struct{ f *os.File }

func newZeroer(f *os.File, block bool) zeroer { return portableZeroer{f} }

func (z portableZeroer) zeroRange(off, n int64) error { return writeZeros(z.f, off, n) }
