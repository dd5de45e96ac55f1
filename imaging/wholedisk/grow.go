package wholedisk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// ErrCannotGrow means a grown partition's file system stays its old size:
// no tool here grows it. The partition is grown all the same.
var ErrCannotGrow = errors.New("file system not grown")

// GrowFileSystem grows the file system of partition p of the disk at path
// to fill the partition, once nothing else holds the disk open. ext2/3/4
// grow with e2fsprogs (e2fsck -f -p, then resize2fs) where they are on the
// PATH; other file systems wrap ErrCannotGrow. It returns the file
// system's name.
func GrowFileSystem(ctx context.Context, path string, p Partition) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	var magic [2]byte
	_, err = f.ReadAt(magic[:], p.Start+1024+0x38)
	st, serr := f.Stat()
	f.Close()
	if err != nil || serr != nil || binary.LittleEndian.Uint16(magic[:]) != 0xEF53 {
		return "", fmt.Errorf("dolly grows ext2/3/4 only: %w", ErrCannotGrow)
	}
	return "ext4", growExt(ctx, path, st.Mode().IsRegular(), p)
}

// growExt runs e2fsprogs on the partition in place. On a block device,
// "path?offset=N" opens it at the partition's start, so neither a
// partition device nor a re-read table is needed. A file is attached to a
// loop device over the partition instead: given a regular file, resize2fs
// would cut the file to the file system's length.
func growExt(ctx context.Context, path string, file bool, p Partition) error {
	tools := []string{"e2fsck", "resize2fs"}
	if file {
		tools = append(tools, "losetup")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("no %s here: %w", tool, ErrCannotGrow)
		}
	}
	dev := fmt.Sprintf("%s?offset=%d", path, p.Start)
	if file {
		out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--offset", fmt.Sprint(p.Start), "--sizelimit", fmt.Sprint(p.Len), path).Output()
		if err != nil {
			var stderr []byte
			if exit, ok := err.(*exec.ExitError); ok {
				stderr = exit.Stderr
			}
			return fmt.Errorf("a loop device over the partition: %v: %s: %w", err, strings.TrimSpace(string(stderr)), ErrCannotGrow)
		}
		dev = strings.TrimSpace(string(out))
		defer exec.Command("losetup", "--detach", dev).Run()
	}
	// resize2fs wants a file system checked since it was last mounted;
	// -p fixes only what is safe without asking. Exit 1: fixed, fine.
	out, err := exec.CommandContext(ctx, "e2fsck", "-f", "-p", dev).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		return fmt.Errorf("e2fsck -f -p before growing: %v: %s", err, strings.TrimSpace(string(out)))
	}
	out, err = exec.CommandContext(ctx, "resize2fs", dev, fmt.Sprintf("%ds", p.Len/512)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("resize2fs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
