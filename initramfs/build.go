package initramfs

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/u-root/u-root/pkg/cpio"
)

// Options say what goes into an initramfs.
type Options struct {
	// Output is the file to write: a gzip-compressed newc cpio archive.
	Output string
	// Init is the dolly-init binary, which becomes /init. It must be
	// statically linked: the archive holds no shared libraries.
	Init string
	// Shell is the rescue shell, which becomes /bin/sh (optional, but
	// without it a node that fails can only power off). Static as well.
	Shell string
	// ModulesDir is the kernel modules directory to take modules from,
	// /lib/modules/VERSION. Empty: the one of Kernel. Both empty: no
	// modules, for a kernel with its drivers built in.
	ModulesDir string
	// Kernel is the kernel image the initramfs is for; only its version
	// matters, to find its modules.
	Kernel string
	// Modules selects modules by path (see DefaultModules); nil takes the
	// default set.
	Modules []string
	Logger  *slog.Logger
}

// Build writes the initramfs described by opts: /init, /bin/sh, the mount
// points and device nodes init needs before devtmpfs is up, and the kernel
// modules for NICs and disks together with everything they depend on. The
// archive is written to a temporary file and renamed into place, so a
// failed build leaves no half archive behind.
func Build(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Output == "" {
		return errors.New("initramfs: no output file")
	}
	if opts.Init == "" {
		return errors.New("initramfs: no init binary: build initramfs/cmd/dolly-init and pass its path")
	}
	modDir := opts.ModulesDir
	if modDir == "" && opts.Kernel != "" {
		version, err := KernelVersion(opts.Kernel)
		if err != nil {
			return err
		}
		modDir = filepath.Join("/lib/modules", version)
	}

	a := &archive{ctx: ctx, dirs: make(map[string]bool)}
	for _, d := range []string{"bin", "dev", "etc", "lib/modules", "proc", "root", "run", "sys", "tmp"} {
		a.dir(d)
	}
	a.add(cpio.CharDev("dev/console", 0o600, 5, 1))
	a.add(cpio.CharDev("dev/null", 0o666, 1, 3))
	a.add(cpio.StaticFile("etc/resolv.conf", "", 0o644)) // written by DHCP at boot
	if err := a.file("init", opts.Init, 0o755); err != nil {
		return err
	}
	if opts.Shell != "" {
		if err := a.file("bin/sh", opts.Shell, 0o755); err != nil {
			return err
		}
	}

	var nmods int
	var modBytes int64
	if modDir != "" {
		mods, err := ReadModules(modDir)
		if err != nil {
			return fmt.Errorf("kernel modules: %w (is the kernel's modules package installed? -modules DIR picks another directory)", err)
		}
		patterns := opts.Modules
		if patterns == nil {
			patterns = DefaultModules()
		}
		chosen, err := mods.Select(patterns)
		if err != nil {
			return err
		}
		root := path.Join("lib/modules", filepath.Base(modDir))
		before := a.bytes
		for _, p := range chosen {
			if err := a.file(path.Join(root, p), filepath.Join(modDir, p), 0o644); err != nil {
				return err
			}
		}
		nmods, modBytes = len(chosen), a.bytes-before
		if err := a.moduleIndex(mods, chosen, root); err != nil {
			return err
		}
		log.Info("kernel modules", "dir", modDir, "modules", nmods, "bytes", modBytes)
	}

	if err := a.write(opts.Output); err != nil {
		return fmt.Errorf("initramfs %s: %w", opts.Output, err)
	}
	st, err := os.Stat(opts.Output)
	if err != nil {
		return err
	}
	log.Info("initramfs written", "file", opts.Output, "size", st.Size(), "uncompressed", a.bytes, "files", len(a.recs), "modules", nmods)
	return nil
}

// archive collects the records of an initramfs in the order they are
// written: every directory before what it holds, since the kernel does not
// create missing parents when it unpacks.
type archive struct {
	ctx   context.Context
	recs  []cpio.Record
	dirs  map[string]bool
	bytes int64 // file content so far
}

func (a *archive) add(r cpio.Record) {
	a.dir(path.Dir(r.Name))
	r.Ino = uint64(len(a.recs) + 1)
	r.NLink = 1
	a.recs = append(a.recs, r)
}

// dir adds a directory and its missing parents.
func (a *archive) dir(d string) {
	if d == "." || d == "/" || d == "" || a.dirs[d] {
		return
	}
	a.dir(path.Dir(d))
	a.dirs[d] = true
	mode := uint64(0o755)
	if d == "tmp" {
		mode = 0o1777
	}
	r := cpio.Directory(d, mode)
	r.Ino = uint64(len(a.recs) + 1)
	r.NLink = 2
	a.recs = append(a.recs, r)
}

// file adds the host file src as name. The file is only opened when the
// archive is written.
func (a *archive) file(name, src string, perm uint64) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if st.Size() == 0 {
		return fmt.Errorf("%s is empty", src)
	}
	a.add(cpio.Record{
		ReaderAt: &lazyFile{name: src},
		Info:     cpio.Info{Name: name, Mode: cpio.S_IFREG | perm, FileSize: uint64(st.Size())},
	})
	a.bytes += st.Size()
	return nil
}

// moduleIndex adds the index files the module loader reads, cut down to the
// chosen modules so that a device whose driver was left out is not looked
// up in vain.
func (a *archive) moduleIndex(mods *Modules, chosen []string, root string) error {
	keep := make(map[string]bool, len(chosen))
	names := make(map[string]bool, len(chosen))
	for _, p := range chosen {
		keep[p] = true
		names[ModuleName(p)] = true
	}
	filters := []struct {
		file string
		keep func(line string) bool // nil: copy as is
	}{
		{"modules.dep", func(l string) bool { p, _, _ := strings.Cut(l, ":"); return keep[p] }},
		{"modules.order", func(l string) bool { return keep[l] }},
		{"modules.alias", func(l string) bool {
			f := strings.Fields(l)
			return len(f) == 3 && f[0] == "alias" && names[ModuleName(f[2])]
		}},
		{"modules.softdep", nil},
		{"modules.builtin", nil},
		{"modules.builtin.modinfo", nil},
	}
	for _, f := range filters {
		src := filepath.Join(mods.Dir, f.file)
		b, err := os.ReadFile(src)
		if errors.Is(err, os.ErrNotExist) && f.file != "modules.dep" {
			continue
		}
		if err != nil {
			return err
		}
		if f.keep != nil {
			var out bytes.Buffer
			for line := range strings.Lines(string(b)) {
				if f.keep(strings.TrimSpace(line)) {
					out.WriteString(line)
				}
			}
			b = out.Bytes()
		}
		a.add(cpio.StaticRecord(b, cpio.Info{Name: path.Join(root, f.file), Mode: cpio.S_IFREG | 0o644}))
		a.bytes += int64(len(b))
	}
	return nil
}

// write writes the compressed archive to a temporary file beside out and
// renames it into place.
func (a *archive) write(out string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	buf := bufio.NewWriterSize(f, 1<<20)
	zw, err := gzip.NewWriterLevel(buf, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	w := cpio.Newc.Writer(zw)
	for _, r := range a.recs {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		if err := w.WriteRecord(r); err != nil {
			return fmt.Errorf("adding %s: %w", r.Name, err)
		}
	}
	if err := cpio.WriteTrailer(w); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := buf.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

// lazyFile opens its file on first read, so that building an archive of a
// thousand modules does not hold a thousand descriptors. The cpio writer
// closes it once the content is copied.
type lazyFile struct {
	name string
	f    *os.File
}

func (l *lazyFile) ReadAt(p []byte, off int64) (int, error) {
	if l.f == nil {
		f, err := os.Open(l.name)
		if err != nil {
			return 0, err
		}
		l.f = f
	}
	return l.f.ReadAt(p, off)
}

func (l *lazyFile) Close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// KernelVersion returns the release (uname -r) of a kernel image, from its
// file name ("/boot/vmlinuz-6.1.0-56-amd64") or else from the version
// string an x86 bzImage carries in its setup header.
func KernelVersion(kernel string) (string, error) {
	base := filepath.Base(kernel)
	for _, prefix := range []string{"vmlinuz-", "vmlinux-", "bzImage-", "kernel-", "linux-"} {
		if v, ok := strings.CutPrefix(base, prefix); ok && v != "" && v[0] >= '0' && v[0] <= '9' {
			return v, nil
		}
	}
	v, err := bzImageVersion(kernel)
	if err != nil {
		return "", fmt.Errorf("kernel %s: cannot tell its version from its name or its header (%v): give -modules /lib/modules/VERSION", kernel, err)
	}
	return v, nil
}

// bzImageVersion reads the version string of an x86 boot image. The setup
// header at 0x1f1 holds "HdrS" at 0x202 and at 0x20e the offset, less 0x200,
// of a string that starts with the release.
func bzImageVersion(kernel string) (string, error) {
	f, err := os.Open(kernel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hdr := make([]byte, 0x210)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return "", err
	}
	if string(hdr[0x202:0x206]) != "HdrS" {
		return "", errors.New("not a bzImage")
	}
	off := int64(binary.LittleEndian.Uint16(hdr[0x20e:])) + 0x200
	s := make([]byte, 256)
	n, err := f.ReadAt(s, off)
	if n == 0 {
		return "", fmt.Errorf("reading version string: %w", err)
	}
	v, _, _ := strings.Cut(string(s[:n]), " ")
	if v == "" || v[0] < '0' || v[0] > '9' {
		return "", errors.New("no version string")
	}
	return v, nil
}

// NewestKernel returns the kernel image in dir (such as /boot) with the
// highest version.
func NewestKernel(dir string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	if err != nil {
		return "", err
	}
	if len(matches) == 0 {
		return "", fmt.Errorf("no kernel (vmlinuz-*) in %s: give -kernel PATH or -modules DIR", dir)
	}
	slices.SortFunc(matches, func(a, b string) int { return compareVersions(filepath.Base(a), filepath.Base(b)) })
	return matches[len(matches)-1], nil
}

// compareVersions compares two version strings number by number, so that
// 6.10 comes after 6.9.
func compareVersions(a, b string) int {
	na, nb := versionNumbers(a), versionNumbers(b)
	if c := slices.Compare(na, nb); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

func versionNumbers(s string) []int {
	var ns []int
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r < '0' || r > '9' }) {
		n, _ := strconv.Atoi(f)
		ns = append(ns, n)
	}
	return ns
}
