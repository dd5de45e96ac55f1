package imaging

import "bytes"

// ZeroBlock is the granularity of zero-run detection: a zero run starts and
// ends on a ZeroBlock boundary of the image (except at the image's end), so
// it can be zeroed on any block device without a read-modify-write.
const ZeroBlock = 4096

// MinZeroRun is the shortest zero run worth zeroing instead of writing:
// shorter runs cost more in frames and syscalls than they save.
const MinZeroRun = 64 << 10

var zeroPage [64 << 10]byte

// IsZero reports whether p holds only zero bytes.
func IsZero(p []byte) bool {
	for len(p) > 0 {
		k := min(len(p), len(zeroPage))
		if !bytes.Equal(p[:k], zeroPage[:k]) {
			return false
		}
		p = p[k:]
	}
	return true
}

// Segment is a piece of an image buffer: data to write, or a run of zeros.
type Segment struct {
	Off  int64 // image offset
	Len  int
	Zero bool
}

// Segments splits p, which holds the image bytes at offset off, into data
// and zero segments. Zero segments are whole ZeroBlocks aligned to the image
// and at least minRun long, except that a final partial block at the end of
// p counts as zero when eof says p ends the image. Adjacent segments of the
// same kind are merged. fn is called for each segment in order.
func Segments(p []byte, off int64, minRun int, eof bool, fn func(Segment)) {
	var cur Segment
	have := false
	emit := func(s Segment) {
		if have && cur.Zero == s.Zero {
			cur.Len += s.Len
			return
		}
		if have {
			fn(cur)
		}
		cur, have = s, true
	}
	// Runs of zero blocks shorter than minRun are folded into data.
	var run Segment // pending zero run
	flushRun := func() {
		if run.Len == 0 {
			return
		}
		run.Zero = run.Len >= minRun
		emit(run)
		run = Segment{}
	}
	i := 0
	for i < len(p) {
		// Blocks are aligned to the image, not to p.
		end := min(len(p), i+int(ZeroBlock-(off+int64(i))%ZeroBlock))
		b := p[i:end]
		aligned := len(b) == ZeroBlock || (end == len(p) && eof && (off+int64(i))%ZeroBlock == 0)
		if aligned && IsZero(b) {
			if run.Len == 0 {
				run.Off = off + int64(i)
			}
			run.Len += len(b)
		} else {
			flushRun()
			emit(Segment{Off: off + int64(i), Len: len(b)})
		}
		i = end
	}
	flushRun()
	if have {
		fn(cur)
	}
}
