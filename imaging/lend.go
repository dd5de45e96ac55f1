package imaging

// A BufferLender lends the buffers a decoder decodes into, so that what it
// decodes reaches the disk from where it lies: a target written with
// O_DIRECT would otherwise copy every byte into an aligned buffer of its
// own first.
//
// Between LendBuffer and ReturnBuffer, WriteAt takes slices of the lent
// buffer without copying them; once returned, the buffer is the lender's
// again, and is lent anew once the disk is done with it. A decoder holds
// one buffer at a time.
type BufferLender interface {
	// LendBuffer returns a buffer of at least LentSize bytes, its first
	// byte DirectAlign-aligned, or nil when the writer has none to lend
	// (it writes through the page cache).
	LendBuffer() []byte
	// ReturnBuffer gives back a buffer LendBuffer returned, once every
	// write from it has been made.
	ReturnBuffer(b []byte)
}

// LentSize is the size of a lent buffer: an image chunk a source
// compresses apart (ChunkSize), which decodes in one piece.
const LentSize = ChunkSize

// lentSlack is a lent buffer's room past LentSize: zstd's decoder runs
// its fast path only when its output has 16 bytes to spare.
const lentSlack = 64

// LendFrom is for writers that wrap another: w's lent buffer, or nil when
// w lends none.
func LendFrom(w any) []byte {
	if l, ok := w.(BufferLender); ok {
		return l.LendBuffer()
	}
	return nil
}

// ReturnTo gives b back to w, which lent it (LendFrom).
func ReturnTo(w any, b []byte) {
	if l, ok := w.(BufferLender); ok && b != nil {
		l.ReturnBuffer(b)
	}
}
