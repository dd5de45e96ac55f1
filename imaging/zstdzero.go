package imaging

import (
	"encoding/binary"
	"io"
)

// A run of zeros in a stream the source compresses on the fly travels as
// a zstd frame of its own, in one canonical form (AppendZstdZeros): RLE
// blocks of zero. Any zstd decoder reads it as the zeros it stands for. A
// cast's decoder (NewStreamDecoder) knows it by its bytes and hands the
// run on without decoding it, to a writer that zeroes a range (ZeroWriter)
// without ever holding the zeros: a filesystem's free space, often most of
// an image, then costs a node no decoding, no copy and no scan.

// zstdZeroHeader is a zero frame's header before its content size: the
// magic number, then a descriptor of a single segment with a 4-byte
// content size, no checksum and no dictionary.
var zstdZeroHeader = [5]byte{0x28, 0xb5, 0x2f, 0xfd, 0xa0}

const (
	zstdZeroHeaderLen = len(zstdZeroHeader) + 4
	// ZstdZeroFrameMax is the longest run one zero frame carries.
	ZstdZeroFrameMax = 64 << 20
)

// AppendZstdZeros appends to dst the zero frames of n zero bytes: one
// frame per ZstdZeroFrameMax.
func AppendZstdZeros(dst []byte, n int64) []byte {
	for n > 0 {
		run := min(n, ZstdZeroFrameMax)
		n -= run
		dst = append(dst, zstdZeroHeader[:]...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(run))
		for run > 0 {
			size := min(run, zstdMaxBlock)
			run -= size
			dst = appendZeroBlock(dst, size, run == 0)
		}
	}
	return dst
}

// appendZeroBlock appends an RLE block of size zeros.
func appendZeroBlock(dst []byte, size int64, last bool) []byte {
	head := uint32(size)<<3 | zstdBlockRLE<<1
	if last {
		head |= 1
	}
	return append(dst, byte(head), byte(head>>8), byte(head>>16), 0)
}

// zstdZeroFrameLen returns the length of the zero frame whose header
// starts b, and the zeros it stands for; ok is false if b does not start
// with a zero frame's header.
func zstdZeroFrameLen(b []byte) (size int, run int64, ok bool) {
	if len(b) < zstdZeroHeaderLen || [5]byte(b[:5]) != zstdZeroHeader {
		return 0, 0, false
	}
	run = int64(binary.LittleEndian.Uint32(b[5:]))
	if run == 0 || run > ZstdZeroFrameMax {
		return 0, 0, false
	}
	blocks := (run + zstdMaxBlock - 1) / zstdMaxBlock
	return zstdZeroHeaderLen + 4*int(blocks), run, true
}

// isZstdZeroFrame reports whether b, of the length zstdZeroFrameLen gave
// for the header of run zeros, is the canonical zero frame of run zeros.
func isZstdZeroFrame(b []byte, run int64) bool {
	b = b[zstdZeroHeaderLen:]
	var want [4]byte
	for run > 0 {
		size := min(run, zstdMaxBlock)
		run -= size
		if [4]byte(b) != [4]byte(appendZeroBlock(want[:0], size, run == 0)) {
			return false
		}
		b = b[4:]
	}
	return true
}

// zstdZeroFrame reports whether b starts with a whole zero frame, and its
// length and run.
func zstdZeroFrame(b []byte) (size int, run int64, ok bool) {
	size, run, ok = zstdZeroFrameLen(b)
	if !ok || size > len(b) || !isZstdZeroFrame(b[:size], run) {
		return 0, 0, false
	}
	return size, run, true
}

// A ZeroWriter takes a run of zeros, the next n bytes of what is written
// to it, without being handed them.
type ZeroWriter interface {
	WriteZeros(n int64) error
}

// writeZeroRun writes n zeros to w: as a run, if w takes runs.
func writeZeroRun(w io.Writer, n int64) error {
	if zw, ok := w.(ZeroWriter); ok {
		return zw.WriteZeros(n)
	}
	return writeZeroBytes(w, n)
}

// writeZeroBytes writes n zeros to w as bytes.
func writeZeroBytes(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		if _, err := w.Write(zeroBlock[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
