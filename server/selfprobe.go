package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/probe"
	"dolly/imaging"
	"dolly/imaging/blockmap"
	"dolly/imaging/wholedisk"
	"dolly/internal/units"
)

// Before it admits a node the server learns the image (its size, how it
// decodes and compresses) and measures its own machine, so that neither
// competes with a node's probe for the CPU.

// scan learns a compressed image's raw size and digest before any node is
// welcomed, so a truncated image is caught before a byte is written.
func (s *Server) scan(ctx context.Context) {
	defer close(s.scanned)
	s.profile, s.scanErr = s.scanImage(ctx)
	if s.scanErr == nil && s.img.Encoding.Compressed() {
		// A compressed whole disk's table is read once its size is known.
		if s.disk, s.scanErr = diskLayout(s.img, s.cfg.GrowLast); s.scanErr == nil {
			s.printDisk()
		}
		if s.scanErr == nil && s.usedMap == nil {
			s.scanErr = s.mapDecoded()
		}
	}
}

// mapDecoded reads the block map of a compressed image's file system once
// it is scanned, for the nodes: the stream still carries the free blocks
// (compressed away when they are zeros), but the nodes need not write
// them. Without it each node zeroes all the free space, which a disk
// that cannot zero a range in place (a hard disk, a virtual one) writes
// block by block.
func (s *Server) mapDecoded() error {
	if s.cfg.AllBlocks {
		return nil
	}
	start := time.Now()
	m, err := s.img.ReadMap()
	switch {
	case errors.Is(err, imaging.ErrMapTooFar):
		fmt.Fprintf(s.cfg.Out, "  %v; the nodes write its free blocks too\n", err)
		return nil
	case errors.Is(err, blockmap.ErrUnknown):
		s.log.Debug("no block map", "image", s.img.Path, "reason", err)
		return nil
	case err != nil:
		return fmt.Errorf("%w; or pass -zero-free to write every block", err)
	}
	if s.usedMap, err = m.Encode(maxUsedMap); err != nil {
		return fmt.Errorf("image %s: %w", s.img.Path, err)
	}
	s.freeShare = freeShare(m)
	fmt.Fprintf(s.cfg.Out, "  %s: %s of %s in use (mapped in %s); %s\n", m.FS, units.FormatBytes(m.UsedBytes()),
		units.FormatBytes(m.Size), formatDuration(time.Since(start)), decodedFreeNote)
	return nil
}

// freeShare is the share of m's image its file systems leave free: zero
// runs there the nodes leave or discard rather than zero.
func freeShare(m blockmap.Map) float64 {
	if m.Size <= 0 {
		return 0
	}
	return float64(m.Size-m.UsedBytes()) / float64(m.Size)
}

// decodedFreeNote says what becomes of a compressed image's free blocks.
const decodedFreeNote = "the nodes discard the free blocks where the disk can, else leave them as they are (-zero-free writes them)"

// printDisk says what the nodes do with a whole disk's image.
func (s *Server) printDisk() {
	d := s.disk
	if d == nil {
		return
	}
	grow := "its partitions keep their sizes (-grow-last grows the last one)"
	if d.GrowLast {
		grow = "the last partition grows to the end of each disk"
	}
	fmt.Fprintf(s.cfg.Out, "  a whole disk (%s): a disk of at least %s takes it; %s\n", d.Table, units.FormatBytes(d.MinSize), grow)
}

// scanImage profiles the image for the model; a compressed one is decoded
// whole on the way (probe.Image), which can take a while: say so.
func (s *Server) scanImage(ctx context.Context) (probe.Profile, error) {
	if !s.img.Encoding.Compressed() {
		p, err := probe.Image(ctx, s.img, nil)
		if err != nil || s.cfg.Compress == CompressNo {
			return p, err
		}
		alone := p.EncodeRate
		if err = probe.TimeCompression(ctx, s.img, &p, p.Codec, s.cfg.FrameSize); err != nil {
			return p, err
		}
		s.log.Debug("compression timed", "encoder_mbps", mbps(alone), "whole_path_mbps", mbps(p.EncodeRate))
		s.encodeCrowd, err = probe.NewEncodeCrowd(ctx, s.img, &p)
		return p, err
	}
	fmt.Fprintf(s.cfg.Out, "scanning %s (%s): checking it decodes whole and learning its size…\n", s.cfg.Image, s.img.Encoding)
	start := time.Now()
	last := start
	p, err := probe.Image(ctx, s.img, func(raw int64) {
		if now := time.Now(); now.Sub(last) >= s.cfg.ProgressEvery {
			last = now
			fmt.Fprintf(s.cfg.Out, "  scanned %s so far\n", units.FormatBytes(raw))
		}
	})
	if err != nil {
		return p, err
	}
	fmt.Fprintf(s.cfg.Out, "  %s decodes to %s (compression factor %.2f) in %s\n", s.cfg.Image,
		units.FormatBytes(s.img.Size), float64(s.img.Size)/float64(s.img.StreamSize), formatDuration(time.Since(start)))
	return p, nil
}

// probeSelf measures the source for the capacity model while nodes join,
// its data path through history, the memory its relay's history takes.
func (s *Server) probeSelf(ctx context.Context, history []byte) {
	defer close(s.probed)
	if s.cfg.NoProbe {
		return
	}
	s.probe = probe.Run(ctx, probe.Config{Name: SourceName, Image: s.cfg.Image, Compress: true,
		Budget: probe.CastBudget, DiskBudget: probe.CastDiskBudget, Source: true, RelayHistory: history, SkipDecoders: s.unusedDecoders()})
	s.log.Debug("source probed", "probe", s.probe.Probe, "notes", s.probe.Notes)
}

// maxUsedMap bounds the block map a welcome carries: a longer one is sent
// coarser (blockmap.Map.Encode), and the nodes zero the small free gaps
// it counts as used.
const maxUsedMap = 256 << 10

// mapImage reads the block map of a raw image's file system and has the
// image read through it, unless allBlocks, and says what it leaves out.
// An image that holds no file system the map knows is sent whole; one
// whose file system cannot be trusted is refused before any node joins.
func mapImage(img *imaging.Image, allBlocks bool) (string, error) {
	if allBlocks {
		return "", nil
	}
	if m, err := img.StoredMap(); err != nil || m != nil {
		if err != nil {
			return "", fmt.Errorf("%w; or pass -zero-free to cast it without its map", err)
		}
		return fmt.Sprintf("%s, as the image's own map says: %s of %s in use; the nodes discard the free blocks where the disk can, else leave them as they are (-zero-free writes its zeros)",
			m.FS, units.FormatBytes(m.UsedBytes()), units.FormatBytes(m.Size)), nil
	}
	if img.Encoding != imaging.Raw {
		return "", nil
	}
	if path := blockmap.FindBmap(img.Path); path != "" {
		return useBmap(img, path)
	}
	m, err := img.ReadMap()
	switch {
	case errors.Is(err, blockmap.ErrUnknown):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w; or pass -zero-free to send every block as it is", err)
	}
	if err := img.UseMap(m); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %s of %s in use; %s",
		m.FS, units.FormatBytes(m.UsedBytes()), units.FormatBytes(m.Size), freeNote), nil
}

// nodesMap is the block map the nodes get, to skip the free blocks: the
// one the image is read through, or one a captured image holds.
func nodesMap(img *imaging.Image, allBlocks bool) (*blockmap.Map, error) {
	if m := img.UsedMap(); m != nil {
		return m, nil
	}
	if allBlocks {
		return nil, nil
	}
	return img.StoredMap()
}

// freeNote says what becomes of the free blocks.
const freeNote = "the free blocks are not sent, and the nodes discard them where the disk can, else leave them as they are (-zero-free sends them too)"

// diskLayout reads the partition layout of a whole disk's raw image for
// the nodes, which fit it to their disks; nil for any other image. With
// growLast the image must be a whole disk's.
func diskLayout(img *imaging.Image, growLast bool) (*control.DiskLayout, error) {
	var r io.ReaderAt = img
	if img.Encoding.Compressed() {
		if img.Size == 0 {
			return nil, nil // not scanned yet: once it is
		}
		// The tables are at the disk's start: decode that much.
		dec, err := imaging.NewDecoder(img.Encoding, img.Stream())
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Path, err)
		}
		head := make([]byte, min(img.Size, diskHead))
		_, err = io.ReadFull(dec, head)
		dec.Close()
		if err != nil {
			return nil, fmt.Errorf("image %s: decoding its start: %w", img.Path, err)
		}
		r = bytes.NewReader(head)
	}
	l, err := wholedisk.Read(r, img.Size)
	// Only -grow-last needs the layout: without it, a disk the nodes
	// cannot fit is cast as it is, onto disks at least as large.
	refuse := func(why string) (*control.DiskLayout, error) {
		if growLast {
			return nil, fmt.Errorf("-grow-last: image %s %s", img.Path, why)
		}
		return nil, nil
	}
	switch {
	case errors.Is(err, wholedisk.ErrNotDisk):
		return refuse("is not a whole disk's (no MBR or GPT partition table at its start)")
	case err != nil:
		return refuse(fmt.Sprintf("is not fitted to other disks: %v", err))
	case l.MinSize > img.Size:
		return refuse(fmt.Sprintf("ends before the room its GPT's backup table needs (%d bytes, not %d)", img.Size, l.MinSize))
	case l.LastExtended:
		if _, err := refuse("ends in an MBR extended partition, whose logical partitions are not grown"); err != nil {
			return nil, err
		}
	}
	d := &control.DiskLayout{Table: l.Table, MinSize: l.MinSize, GrowLast: growLast}
	for _, p := range l.Parts[:min(len(l.Parts), maxParts)] {
		d.Parts = append(d.Parts, [2]int64{p.Start, p.Len})
	}
	return d, nil
}

// maxParts bounds the partitions a welcome names.
const maxParts = 256

// diskHead is how much of a compressed image is decoded to read a whole
// disk's partition table: MBR, GPT header and entries, with room.
const diskHead = 1 << 20

// bmapCheck is how much of an image its .bmap's checksums are checked on
// before the cast: enough to catch a map of another image.
const bmapCheck = 64 << 20

// useBmap has the image read through the .bmap at path.
func useBmap(img *imaging.Image, path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the bmap beside image %s: %w", img.Path, err)
	}
	refuse := func(err error) (string, error) {
		return "", fmt.Errorf("image %s: its bmap %s: %w; remove the bmap, or pass -zero-free to send every block as it is", img.Path, path, err)
	}
	// A bmap made before the image last changed may miss blocks in use
	// since: its checksums see only the blocks it lists.
	if bst, err := os.Stat(path); err == nil {
		if ist, err := os.Stat(img.Path); err == nil && ist.Mode().IsRegular() && ist.ModTime().After(bst.ModTime()) {
			return refuse(fmt.Errorf("the image changed after the bmap was made (%s, bmap %s)",
				ist.ModTime().Format(time.DateTime), bst.ModTime().Format(time.DateTime)))
		}
	}
	m, checks, err := blockmap.ParseBmap(data, img.Size)
	if err == nil {
		err = blockmap.VerifyBmap(img, checks, bmapCheck)
	}
	if err != nil {
		return refuse(err)
	}
	// The file system's own map, where there is one, keeps what it uses
	// even if the bmap left it out.
	switch fsm, err := img.ReadMap(); {
	case err == nil:
		m = blockmap.Union(m, fsm)
	case !errors.Is(err, blockmap.ErrUnknown):
		return "", fmt.Errorf("%w; or pass -zero-free to send every block as it is", err)
	}
	if err := img.UseMap(m); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s maps %s of %s; %s",
		filepath.Base(path), units.FormatBytes(m.UsedBytes()), units.FormatBytes(m.Size), freeNote), nil
}
