package imaging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"dolly/imaging/blockmap"
	"dolly/internal/units"
)

// Image is an image file (or a block device) opened as the source of a cast.
type Image struct {
	Path       string
	Encoding   Encoding
	StreamSize int64 // bytes in the file as stored (what goes on the wire)
	// Size is the raw length written to each target. For compressed images
	// it is known after Scan.
	Size int64
	// Digest is the content digest of the raw bytes. For compressed images
	// Scan computes it; for raw images the source computes it while casting.
	Digest Digest
	// ZeroBytes is how much of a compressed image decodes to zero runs,
	// known after Scan.
	ZeroBytes int64
	f         *os.File
	used      *blockmap.Map // read through it when set (UseMap)
}

// OpenImage opens an image and detects its encoding from its first bytes.
func OpenImage(path string) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("image %s does not exist", path)
		}
		return nil, fmt.Errorf("image %s cannot be read: %w", path, unwrapPathError(err))
	}
	im := &Image{Path: path, f: f}
	if err := im.inspect(); err != nil {
		f.Close()
		return nil, err
	}
	return im, nil
}

func (im *Image) inspect() error {
	st, err := im.f.Stat()
	if err != nil {
		return fmt.Errorf("image %s: %w", im.Path, err)
	}
	if st.IsDir() {
		return fmt.Errorf("image %s is a directory, not an image file", im.Path)
	}
	size, err := im.f.Seek(0, io.SeekEnd) // works for block devices too
	if err != nil {
		return fmt.Errorf("image %s: reading its size: %w", im.Path, err)
	}
	if size == 0 {
		return fmt.Errorf("image %s is empty", im.Path)
	}
	head := make([]byte, MagicLen)
	n, err := im.f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return fmt.Errorf("image %s cannot be read: %w", im.Path, unwrapPathError(err))
	}
	enc, err := Detect(head[:n])
	if err != nil {
		return fmt.Errorf("image %s: %w", im.Path, err)
	}
	im.Encoding, im.StreamSize = enc, size
	if enc == Raw {
		im.Size = size
	}
	return nil
}

// Stream returns a reader of the stored bytes from the start, independent
// of other readers of the same image.
func (im *Image) Stream() io.Reader { return io.NewSectionReader(im.reader(), 0, im.StreamSize) }

// reader reads the stored image, through its map if it has one.
func (im *Image) reader() io.ReaderAt {
	if im.used != nil {
		return readerAtFunc(im.readUsed)
	}
	return im.f
}

type readerAtFunc func(p []byte, off int64) (int, error)

func (f readerAtFunc) ReadAt(p []byte, off int64) (int, error) { return f(p, off) }

// ZstdCounts is what CountZstd counts of a zstd image's raw bytes: how
// many a decoder fills from RLE blocks, how many of those a cast's decoder
// skips, how many lie in frames it may decode whole; nothing for other
// encodings.
func (im *Image) ZstdCounts() (ZstdCounts, error) {
	if im.Encoding != Zstd {
		return ZstdCounts{}, nil
	}
	c, err := CountZstd(im.f, im.StreamSize)
	if err != nil {
		return ZstdCounts{}, fmt.Errorf("image %s: %w", im.Path, err)
	}
	return c, nil
}

// Close closes the image file.
func (im *Image) Close() error { return im.f.Close() }

// A ScanWatcher sees a scan decode, to measure it; imaging itself times
// nothing.
type ScanWatcher interface {
	// Read reads the next decoded bytes from dec into p, as ReadFull does.
	Read(dec io.Reader, p []byte) (int, error)
	// Decoded tells of one read: raw bytes at raw offset off, zero of them
	// in zero runs, decoded from packed stored bytes.
	Decoded(off, raw, zero, packed int64)
}

// Scan decodes a compressed image once to learn its raw size and digest and
// to prove it is whole: a truncated or corrupt image fails here, before any
// node writes a byte. progress, if set, is called with raw bytes decoded;
// watch, if set, sees every read. Raw images need no scan.
func (im *Image) Scan(ctx context.Context, progress func(raw int64), watch ScanWatcher) error {
	if !im.Encoding.Compressed() {
		return nil
	}
	cr := &countingReader{r: im.Stream()}
	dec, err := NewDecoder(im.Encoding, cr)
	if err != nil {
		return fmt.Errorf("image %s is not a valid %s stream: %w", im.Path, im.Encoding, err)
	}
	defer dec.Close()
	d := NewDigester()
	buf := make([]byte, 1<<20)
	var zeros int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Whole buffers keep zero runs aligned to the image, as a node
		// sees them.
		packed := cr.n
		var n int
		var rerr error
		if watch != nil {
			n, rerr = watch.Read(dec, buf)
		} else {
			n, rerr = ReadFull(dec, buf)
		}
		eof := rerr == io.EOF
		if n > 0 {
			var z int64
			Segments(buf[:n], d.Len(), MinZeroRun, eof, func(s Segment) {
				if s.Zero {
					z += int64(s.Len)
				}
			})
			zeros += z
			if watch != nil {
				watch.Decoded(d.Len(), int64(n), z, cr.n-packed)
			}
			d.Write(buf[:n])
			if progress != nil {
				progress(d.Len())
			}
		}
		if eof {
			break
		}
		if rerr != nil {
			return fmt.Errorf("image %s is truncated or corrupt (%s compressed stream, failed after %s of %s stored bytes, %s decoded): %w",
				im.Path, im.Encoding, units.FormatBytes(cr.n), units.FormatBytes(im.StreamSize), units.FormatBytes(d.Len()), rerr)
		}
	}
	if d.Len() == 0 {
		return fmt.Errorf("image %s decodes to nothing", im.Path)
	}
	im.Size = d.Len()
	im.Digest = d.Sum()
	im.ZeroBytes = zeros
	return nil
}

// ReadAt reads the stored image at off, through its map if it has one.
func (im *Image) ReadAt(p []byte, off int64) (int, error) { return im.reader().ReadAt(p, off) }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ReadFull fills p unless r ends (io.EOF, with what was read) or fails.
// Unlike io.ReadFull it keeps a decoder's own io.ErrUnexpectedEOF, which
// means a truncated stream, apart from a clean end.
func ReadFull(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := r.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Fingerprint identifies the image file cheaply: its size, encoding and
// SHA-256 over samples from all over it, and for a regular file its
// modification time, which any write in place changes. A restarted
// server compares it with what its nodes remember before taking their cast
// up again under the same cast ID, and so the same frame keys: frames of
// other bytes under the same key and frame numbers would reuse AES-GCM
// nonces. The content digest at the end catches what samples cannot.
func (im *Image) Fingerprint() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%d %s\n", im.StreamSize, im.Encoding)
	if st, err := im.f.Stat(); err == nil && st.Mode().IsRegular() {
		fmt.Fprintf(h, "mtime %d\n", st.ModTime().UnixNano())
	}
	if im.used != nil {
		fmt.Fprintf(h, "used %s\n", usedMapDigest(im.used))
	}
	const samples, block = 32, 16 << 10
	buf := make([]byte, block)
	step := max(im.StreamSize/samples, 1)
	for off := int64(0); off < im.StreamSize; off += step {
		n, err := im.f.ReadAt(buf[:min(int64(block), im.StreamSize-off)], off)
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("image %s: %w", im.Path, err)
		}
		h.Write(buf[:n])
	}
	tail := max(im.StreamSize-block, 0)
	n, err := im.f.ReadAt(buf[:im.StreamSize-tail], tail)
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("image %s: %w", im.Path, err)
	}
	h.Write(buf[:n])
	return hex.EncodeToString(h.Sum(nil)), nil
}
