package sampleimage

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildOther makes an NTFS or FAT32 image at path of the files staged in
// staging: the disk is written with spec.Junk bytes of old data first
// (zeros after), then quick-formatted, so its free space keeps that data,
// and the files' bytes are copied in.
func buildOther(ctx context.Context, path, staging string, spec Spec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, junkData(), min(spec.Junk, spec.Size))
	if err == nil {
		err = f.Truncate(spec.Size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sample image %s: %w", path, err)
	}
	bundles, err := bundle(staging)
	if err != nil {
		return err
	}
	run := func(cmd *exec.Cmd) error {
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", filepath.Base(cmd.Path), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if spec.FS == "fat32" {
		// 4 KiB clusters, aligned by mkfs.fat: free runs are whole pages.
		if err := run(exec.CommandContext(ctx, "mkfs.fat", "-F", "32", "-s", "8", "-n", "DOLLY", path)); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "mcopy", append(append([]string{"-Q", "-i", path}, bundles...), "::/")...)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		return run(cmd)
	}
	if err := run(exec.CommandContext(ctx, "mkntfs", "-Q", "-F", "-q", "-L", "dolly-sample", path)); err != nil {
		return err
	}
	for _, b := range bundles {
		if err := run(exec.CommandContext(ctx, "ntfscp", "-q", path, b, filepath.Base(b))); err != nil {
			return err
		}
	}
	return nil
}

// bundleSize is the size of the files an NTFS or FAT32 image holds: the
// tools that write them without mounting take one file at a time (ntfscp)
// or run out of directory entries on a deep tree (mcopy), so the staged
// files' bytes go in, in order, as bundles of this size.
const bundleSize = 8 << 20

// bundle writes the bytes of the files under staging into bundles in a
// directory of staging's own, and returns their paths.
func bundle(staging string) ([]string, error) {
	var paths []string
	var out *os.File
	var written int64
	next := func() error {
		if out != nil {
			if err := out.Close(); err != nil {
				return err
			}
		}
		p := filepath.Join(staging, fmt.Sprintf("B%04d.BIN", len(paths)))
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		out, written = f, 0
		paths = append(paths, p)
		return nil
	}
	var files []string
	err := filepath.WalkDir(staging, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, p := range files {
		in, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		for {
			if out == nil || written == bundleSize {
				if err = next(); err != nil {
					break
				}
			}
			var k int64
			k, err = io.CopyN(out, in, bundleSize-written)
			written += k
			if err != nil {
				break
			}
		}
		in.Close()
		if err != io.EOF {
			return nil, err
		}
	}
	if out != nil {
		if err := out.Close(); err != nil {
			return nil, err
		}
	}
	return paths, nil
}
