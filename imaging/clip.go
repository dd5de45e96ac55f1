package imaging

// Clipped writes an image to a target shorter than the image, dropping
// what lies past the target's end. It is for a whole disk's image cast to
// a smaller disk, where everything past the last partition is free space
// and the old backup table, which is written again at the disk's end.
type Clipped struct {
	w    BlockWriter
	size int64
}

// Clip wraps w to drop writes at or past size.
func Clip(w BlockWriter, size int64) *Clipped { return &Clipped{w: w, size: size} }

func (c *Clipped) clip(off, n int64) int64 { return max(0, min(n, c.size-off)) }

// WriteAt writes what of p lies before the end.
func (c *Clipped) WriteAt(p []byte, off int64) (int, error) {
	if k := c.clip(off, int64(len(p))); k > 0 {
		if _, err := c.w.WriteAt(p[:k], off); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// ZeroRange zeroes what of the range lies before the end.
func (c *Clipped) ZeroRange(off, n int64) error {
	if k := c.clip(off, n); k > 0 {
		return c.w.ZeroRange(off, k)
	}
	return nil
}

// LendBuffer lends the target's buffer (BufferLender).
func (c *Clipped) LendBuffer() []byte { return LendFrom(c.w) }

// ReturnBuffer returns it.
func (c *Clipped) ReturnBuffer(b []byte) { ReturnTo(c.w, b) }

// Discard discards what of the range lies before the end, where the
// target can.
func (c *Clipped) Discard(off, n int64) error {
	d, ok := c.w.(Discarder)
	if k := c.clip(off, n); ok && k > 0 {
		return d.Discard(off, k)
	}
	return nil
}
