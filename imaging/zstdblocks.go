package imaging

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// zstd's block types (RFC 8878, 3.1.1.2).
const (
	zstdBlockRaw = iota
	zstdBlockRLE
	zstdBlockCompressed
)

// zstdMaxBlock is the largest block zstd writes: 128 KiB.
const zstdMaxBlock = 128 << 10

// ZstdCounts are what CountZstd counts of a zstd stream's decoded bytes.
type ZstdCounts struct {
	// RLE is what comes from RLE blocks, blocks of one byte repeated,
	// that a decoder fills. zstd's own tool writes one for every 128 KiB
	// of zeros, so a filesystem's free space decodes from them; they cost
	// a decoder a byte-by-byte fill, which runs at different speeds in
	// different programs, unlike the rest of the stream.
	RLE int64
	// Skipped is, of RLE, what a cast's decoder hands on as zeros without
	// the decoder (skipZeros).
	Skipped int64
	// Whole is what lies in frames a cast's decoder may decode whole
	// (decodesWhole): frames of a chunk or less, as dolly compresses an
	// image on the fly or captures one.
	Whole int64
}

// ZstdRLEBytes is CountZstd's RLE and Skipped.
func ZstdRLEBytes(r io.ReaderAt, size int64) (rle, skipped int64, err error) {
	c, err := CountZstd(r, size)
	return c.RLE, c.Skipped, err
}

// CountZstd walks the frames and block headers of the zstd stream of size
// bytes in r and counts its decoded bytes (ZstdCounts). Zero frames
// (AppendZstdZeros) no decoder reads, and count in none. Only the headers
// are read.
func CountZstd(r io.ReaderAt, size int64) (ZstdCounts, error) {
	var pos, rle, skipped, whole int64
	buf := make([]byte, max(zstd.HeaderMaxSize, zstdZeroHeaderLen+4*((ZstdZeroFrameMax+zstdMaxBlock-1)/zstdMaxBlock)))
	for pos < size {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
		if n == 0 {
			return ZstdCounts{}, fmt.Errorf("reading a frame header at %d: %w", pos, err)
		}
		if fsize, _, ok := zstdZeroFrame(buf[:n]); ok {
			pos += int64(fsize)
			continue
		}
		var h zstd.Header
		if err := h.Decode(buf[:min(n, zstd.HeaderMaxSize)]); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return ZstdCounts{}, fmt.Errorf("frame at %d: %w", pos, err)
		}
		if h.HeaderSize == 0 {
			return ZstdCounts{}, fmt.Errorf("frame at %d: truncated header", pos)
		}
		_, dropped := skippingHeader(h, buf[:h.HeaderSize])
		pos += int64(h.HeaderSize)
		if h.Skippable {
			pos += int64(h.SkippableSize)
			continue
		}
		if decodesWhole(h) {
			whole += int64(h.FrameContentSize)
		}
		var zeroRun int64 // as the stream decoder counts it
		for last := false; !last; {
			var b [4]byte
			if _, err := r.ReadAt(b[:3], pos); err != nil {
				return ZstdCounts{}, fmt.Errorf("reading a block header at %d: %w", pos, err)
			}
			head := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
			last = head&1 == 1
			bsize := int64(head >> 3)
			pos += 3
			switch (head >> 1) & 3 {
			case zstdBlockRaw, zstdBlockCompressed:
				pos += bsize
				zeroRun = 0
			case zstdBlockRLE:
				if _, err := r.ReadAt(b[3:], pos); err != nil {
					return ZstdCounts{}, fmt.Errorf("reading an RLE block at %d: %w", pos, err)
				}
				pos++
				rle += bsize
				switch {
				case b[3] != 0:
					zeroRun = 0
				case dropped && skipsZeros(int64(h.WindowSize), zeroRun, bsize, last):
					skipped += bsize
				default:
					zeroRun += bsize
				}
			default:
				return ZstdCounts{}, fmt.Errorf("block at %d: reserved block type", pos-3)
			}
		}
		if h.HasCheckSum {
			pos += 4
		}
	}
	if pos > size {
		return ZstdCounts{}, fmt.Errorf("the stream ends inside a frame (%d of %d bytes)", size, pos)
	}
	return ZstdCounts{RLE: rle, Skipped: skipped, Whole: whole}, nil
}

// ZstdRLEStream returns a zstd stream of size zero bytes (rounded up to
// whole blocks) made of RLE blocks only, as zstd's own tool writes a
// filesystem's free space: the sample that times a decoder's fill.
func ZstdRLEStream(size int) ([]byte, error) {
	h := zstd.Header{WindowSize: zstdMaxBlock}
	out, err := h.AppendTo(nil)
	if err != nil {
		return nil, fmt.Errorf("zstd frame header: %w", err)
	}
	blocks := max(1, (size+zstdMaxBlock-1)/zstdMaxBlock)
	for i := range blocks {
		head := uint32(zstdMaxBlock)<<3 | zstdBlockRLE<<1
		if i == blocks-1 {
			head |= 1
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], head)
		out = append(out, b[0], b[1], b[2], 0) // the header, then the byte

	}
	return out, nil
}
