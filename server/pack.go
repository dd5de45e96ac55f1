package server

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/imaging/blockmap"
	"dolly/internal/units"
)

// PackConfig stores an image in the form a cast takes best: zstd frames
// of imaging.ChunkSize of image each, which every node decodes whole into
// the buffers its disk is written from, after a skippable frame holding
// the image's block map (imaging.MapFrame), as a capture stores a disk.
type PackConfig struct {
	Image  string // raw, zstd or gzip
	Output string // the zstd file to write; it must not exist
	// AllBlocks keeps the free blocks of the image's file systems as they
	// are stored; otherwise they are stored as zeros and the map says so.
	AllBlocks     bool
	ProgressEvery time.Duration
	Out           io.Writer // progress lines
}

// PackSummary is what Pack stored.
type PackSummary struct {
	Size   int64  // raw bytes of the image
	Used   int64  // bytes its block map keeps (Size without one)
	FS     string // the file system mapped, if any
	Stored int64  // bytes of the file written
	Digest imaging.Digest
	// Seconds is the time taken, the check of the written file included.
	Seconds float64
	// Started says the image was read and writing began: an error before
	// it is the command's (nothing was written), one after it the pack's.
	Started bool
}

// Pack writes cfg.Image to cfg.Output as PackConfig says, then decodes
// what it wrote and checks it against what it read. Nothing is left at
// cfg.Output unless the whole image is there and checked.
func Pack(ctx context.Context, cfg PackConfig) (PackSummary, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 5 * time.Second
	}
	start := time.Now()
	switch _, err := os.Stat(cfg.Output); {
	case err == nil:
		return PackSummary{}, fmt.Errorf("%s exists: remove it, or pack to another file", cfg.Output)
	case !errors.Is(err, fs.ErrNotExist):
		return PackSummary{}, err
	}
	im, err := imaging.OpenImage(cfg.Image)
	if err != nil {
		return PackSummary{}, err
	}
	defer im.Close()
	if im.Encoding.Compressed() {
		fmt.Fprintf(cfg.Out, "dolly-server: checking %s (%s): decoding it once\n", cfg.Image, im.Encoding)
		var decoded atomic.Int64
		stop := packProgress(cfg, "checked", -1, &decoded, time.Now())
		err := im.Scan(ctx, decoded.Store, nil)
		stop()
		if err != nil {
			return PackSummary{}, err
		}
	}
	raw, m, note, err := packSource(im, cfg.AllBlocks)
	if err != nil {
		return PackSummary{}, err
	}
	if closer, ok := raw.(io.Closer); ok {
		defer closer.Close()
	}
	fmt.Fprintf(cfg.Out, "dolly-server: %s\n", note)
	sum := PackSummary{Size: im.Size, Used: im.Size}
	if m != nil {
		sum.Used, sum.FS = m.UsedBytes(), m.FS
	}

	partial := cfg.Output + ".partial"
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	switch {
	case errors.Is(err, fs.ErrExist):
		return sum, fmt.Errorf("%s exists: a -pack to %s is running, or one that stopped left it (then remove it)", partial, cfg.Output)
	case err != nil:
		return sum, fmt.Errorf("packing to %s: %w", cfg.Output, err)
	}
	sum.Started = true
	kept := false
	defer func() {
		if !kept {
			f.Close()
			os.Remove(partial)
		}
	}()
	out := bufio.NewWriterSize(f, 1<<20)
	if m != nil {
		frame, err := imaging.MapFrame(*m)
		if err != nil {
			return sum, fmt.Errorf("image %s: %w", cfg.Image, err)
		}
		out.Write(frame)
	}
	read := &countingReader{r: raw}
	stopProgress := packProgress(cfg, "packed", im.Size, &read.n, time.Now())
	sum.Digest, err = stream.CompressChunks(ctx, out, read, imaging.Zstd, imaging.Stored)
	stopProgress()
	if err == nil {
		err = out.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return sum, fmt.Errorf("packing %s to %s: %w", cfg.Image, cfg.Output, err)
	}
	if read.n.Load() != im.Size {
		return sum, fmt.Errorf("packing %s: read %d bytes of %d", cfg.Image, read.n.Load(), im.Size)
	}
	if err := checkPacked(ctx, partial, sum, m != nil); err != nil {
		return sum, err
	}
	if st, err := os.Stat(partial); err == nil {
		sum.Stored = st.Size()
	}
	if err := publish(partial, cfg.Output); err != nil {
		kept = errors.Is(err, errAppeared) // the image stays, under its .partial name
		return sum, err
	}
	kept = true
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

// packSource is the raw image to pack, its free blocks read as zeros
// where a map says which are free, that map (nil: every block kept), and
// what it says of the blocks, for the console.
func packSource(im *imaging.Image, allBlocks bool) (io.Reader, *blockmap.Map, string, error) {
	const whole = "every block is stored as it is"
	if im.Encoding == imaging.Raw {
		if _, err := mapImage(im, allBlocks); err != nil {
			return nil, nil, "", err
		}
		m := im.UsedMap()
		switch {
		case m != nil:
			return im.Stream(), m, usedNote(*m, "the free blocks are stored as zeros (-zero-free keeps them as they are)"), nil
		case allBlocks:
			return im.Stream(), nil, "-zero-free: " + whole, nil
		}
		return im.Stream(), nil, "no file system it maps: " + whole, nil
	}
	dec, err := imaging.NewDecoder(im.Encoding, im.Stream())
	if err != nil {
		return nil, nil, "", fmt.Errorf("image %s: %w", im.Path, err)
	}
	fail := func(err error) (io.Reader, *blockmap.Map, string, error) {
		dec.Close()
		return nil, nil, "", err
	}
	// A captured or packed image says which blocks are free and holds
	// them as zeros already: its map stays, -zero-free or not.
	switch m, err := im.StoredMap(); {
	case err != nil:
		return fail(fmt.Errorf("%w; or pass -zero-free to keep every block as it is", err))
	case m != nil:
		return dec, m, usedNote(*m, "its own map; the free blocks are zeros already"), nil
	}
	if allBlocks {
		return dec, nil, "-zero-free: " + whole, nil
	}
	// Another is mapped from its decoded file system.
	m, err := im.ReadMap()
	switch {
	case errors.Is(err, imaging.ErrMapTooFar):
		return dec, nil, fmt.Sprintf("%v: %s", err, whole), nil
	case errors.Is(err, blockmap.ErrUnknown):
		return dec, nil, "no file system it maps: " + whole, nil
	case err != nil:
		return fail(fmt.Errorf("%w; or pass -zero-free to keep every block as it is", err))
	}
	return struct {
		io.Reader
		io.Closer
	}{imaging.FreeAsZeros(dec, m), dec}, &m, usedNote(m, "the free blocks are stored as zeros (-zero-free keeps them as they are)"), nil
}

// usedNote says how much of its image m keeps, and then what.
func usedNote(m blockmap.Map, then string) string {
	return fmt.Sprintf("%s: %s of %s in use; %s", cmp.Or(m.FS, "block map"), units.FormatBytes(m.UsedBytes()), units.FormatBytes(m.Size), then)
}

// checkPacked decodes the packed file at path and compares it with what
// was read: its size, its digest and whether it holds a map.
func checkPacked(ctx context.Context, path string, want PackSummary, mapped bool) error {
	im, err := imaging.OpenImage(path)
	if err != nil {
		return err
	}
	defer im.Close()
	if err := im.Scan(ctx, nil, nil); err != nil {
		return fmt.Errorf("checking what was packed: %w", err)
	}
	m, err := im.StoredMap()
	switch {
	case err != nil:
		return fmt.Errorf("checking what was packed: %w", err)
	case im.Size != want.Size || im.Digest != want.Digest:
		return fmt.Errorf("checking what was packed: it decodes to %d bytes, digest %s; %d bytes, digest %s were read",
			im.Size, im.Digest.Short(), want.Size, want.Digest.Short())
	case (m != nil) != mapped:
		return errors.New("checking what was packed: its block map is not where it was written")
	}
	return nil
}

// packProgress prints how far a pass over the image is (what done says,
// of size if known: >= 0) until the returned stop.
func packProgress(cfg PackConfig, what string, size int64, done *atomic.Int64, start time.Time) (stop func()) {
	return every(cfg.ProgressEvery, func() {
		n := done.Load()
		rate := float64(n) / 1e6 / time.Since(start).Seconds()
		if size < 0 {
			fmt.Fprintf(cfg.Out, "  %s %s, %.1f MB/s\n", what, units.FormatBytes(n), rate)
		} else {
			fmt.Fprintf(cfg.Out, "  %s %5.1f%% of %s, %.1f MB/s\n", what, 100*float64(n)/float64(max(size, 1)), units.FormatBytes(size), rate)
		}
	})
}

// countingReader counts what it reads, for another goroutine to show.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// packNote suggests -pack for a large compressed image that a cast takes
// worse than the packed one: gzip, which decodes slower than zstd, or zstd
// from its own tool (one frame, too large to decode whole, and no map).
func packNote(img *imaging.Image, worthIt int64) string {
	if img.StreamSize < worthIt {
		return ""
	}
	how := fmt.Sprintf("dolly-server -pack -image %s -o FILE", img.Path)
	switch img.Encoding {
	case imaging.Gzip:
		return fmt.Sprintf("gzip decodes slower than zstd on every node: %s stores it as zstd", how)
	case imaging.Zstd:
		c, err := img.ZstdCounts()
		if err != nil || c.Whole > 0 {
			return ""
		}
		return fmt.Sprintf("%s stores it with its block map (its free blocks as zeros) in zstd frames each node decodes whole", how)
	}
	return ""
}

// packWorthIt is the stored size below which a cast suggests no -pack.
const packWorthIt = 64 << 20
