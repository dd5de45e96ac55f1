// Package sampleimage builds a realistic disk image for demos and
// benchmarks: a file system (ext4 made with mkfs.ext4 -d; or NTFS, FAT32)
// holding real files from this machine (source code, documentation,
// libraries and programs, so the content compresses unevenly), the rest of
// it free space: zeros, or, as on a disk that has been used, old data
// (Junk).
package sampleimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Spec says how big the image is and how much of it holds files.
type Spec struct {
	Size  int64 // image size in bytes (a multiple of 4 KiB)
	Files int64 // bytes of files to copy in, at most
	// Junk is how many bytes of random data a file wrote and left behind
	// when it was deleted: free blocks that are not zeros.
	Junk int64
	// FS is the file system: "ext4" (the default), "ntfs" (mkntfs and
	// ntfscp, from ntfs-3g) or "fat32" (mkfs.fat and mcopy). ext4's junk is
	// a file written and deleted; the others' is the disk's old content
	// under a quick format.
	FS string
	// Roots are the directories files are taken from, in order. Default:
	// Go sources, documentation, shared libraries and programs.
	Roots []string
}

// DefaultRoots mix text, compressed documentation and machine code.
var DefaultRoots = []string{"/usr/local/go/src", "/usr/share/doc", "/usr/lib/x86_64-linux-gnu", "/usr/bin", "/usr/share"}

// Build writes the image to path. It needs mkfs.ext4 (e2fsprogs).
func Build(ctx context.Context, path string, spec Spec) error {
	if spec.Size%4096 != 0 || spec.Size <= 0 {
		return fmt.Errorf("sample image size %d: must be a positive multiple of 4096", spec.Size)
	}
	switch spec.FS {
	case "", "ext4":
		if _, err := exec.LookPath("mkfs.ext4"); err != nil {
			return errors.New("mkfs.ext4 not found: install e2fsprogs")
		}
	case "ntfs", "fat32":
	default:
		return fmt.Errorf("sample image: unknown file system %q", spec.FS)
	}
	roots := spec.Roots
	if roots == nil {
		roots = DefaultRoots
	}
	staging, err := os.MkdirTemp(filepath.Dir(path), ".sample-staging-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	if _, err := gather(staging, roots, spec.Files); err != nil {
		return err
	}
	os.Remove(path)
	if spec.FS == "ntfs" || spec.FS == "fat32" {
		return buildOther(ctx, path, staging, spec)
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-b", "4096", "-L", "dolly-sample",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", "-d", staging, path, fmt.Sprintf("%dk", spec.Size/1024))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if spec.Junk > 0 {
		return leaveJunk(ctx, path, staging, spec.Junk)
	}
	return nil
}

// leaveJunk writes n bytes of random data into the file system at path as
// a file, and deletes it: its blocks are free again, and keep the data.
func leaveJunk(ctx context.Context, path, dir string, n int64) error {
	junk := filepath.Join(dir, "junk")
	f, err := os.Create(junk)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, junkData(), n); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	defer os.Remove(junk)
	for _, req := range []string{"write " + junk + " junk", "rm junk"} {
		if out, err := exec.CommandContext(ctx, "debugfs", "-w", "-R", req, path).CombinedOutput(); err != nil {
			return fmt.Errorf("debugfs %s: %v: %s", req, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// junkData is the old data a used disk keeps: random, the same on every
// run.
func junkData() io.Reader {
	var seed [32]byte
	copy(seed[:], "dolly sample image: deleted data")
	return rand.NewChaCha8(seed)
}

// gather links (or copies) regular files from roots into dir until budget
// bytes are in, walking each root in lexical order so the result is the
// same on every run on one machine.
func gather(dir string, roots []string, budget int64) (int64, error) {
	var total int64
	errFull := errors.New("full")
	for i, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable corners of /usr are skipped
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil || info.Size() == 0 || info.Size() > budget/8 {
				return nil
			}
			if total+info.Size() > budget {
				return errFull
			}
			rel, _ := filepath.Rel(root, p)
			dst := filepath.Join(dir, fmt.Sprintf("r%d", i), rel)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := linkOrCopy(p, dst); err != nil {
				return nil
			}
			total += info.Size()
			return nil
		})
		if errors.Is(err, errFull) {
			break
		}
		if err != nil {
			return total, err
		}
	}
	if total == 0 {
		return 0, fmt.Errorf("no files found under %s", strings.Join(roots, ", "))
	}
	return total, nil
}

func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
