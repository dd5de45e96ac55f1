package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"dolly/imaging"
	"dolly/imaging/wholedisk"
	"dolly/internal/units"
)

// growTimeout bounds growing a file system after the cast.
const growTimeout = 30 * time.Minute

// fitDisk fits the partition table of the whole disk's image just written
// and verified to this node's disk: GPT's backup table goes to the disk's
// end, and with -grow-last the last partition grows to it, with an ext
// file system in it once the target is closed. A file system that cannot
// be grown here is a warning: the disk is whole and verified.
func (n *node) fitDisk(tg *imaging.Target, imageSize int64) error {
	disk, size, err := tg.Disk()
	if err != nil {
		return err
	}
	grow := n.welcome.Disk.GrowLast
	fitted, err := wholedisk.Fit(disk, imageSize, size, grow)
	if err == nil {
		err = tg.Sync()
	}
	if err != nil {
		return fmt.Errorf("fitting the %s partition table to %s: %w", n.welcome.Disk.Table, n.target, err)
	}
	if fitted.Moved {
		n.log.Info("backup partition table moved to the disk's end", "table", fitted.Table, "disk", units.FormatBytes(size))
	}
	p := fitted.Grown
	if p == nil {
		return nil
	}
	n.log.Info("last partition grown", "partition", p.Index, "from", units.FormatBytes(fitted.Was), "to", units.FormatBytes(p.Len))
	// The file system tools open the disk themselves, exclusively.
	n.mu.Lock()
	n.tg = nil
	n.mu.Unlock()
	if err := tg.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), growTimeout)
	defer cancel()
	fs, err := wholedisk.GrowFileSystem(ctx, n.target, *p)
	switch {
	case errors.Is(err, wholedisk.ErrCannotGrow):
		n.log.Warn("the grown partition's file system keeps its size", "partition", p.Index, "why", err)
	case err != nil:
		n.log.Warn("growing the file system failed; it keeps its size", "partition", p.Index, "err", err)
	default:
		n.log.Info("file system grown", "partition", p.Index, "fs", fs, "to", units.FormatBytes(p.Len))
	}
	return nil
}
