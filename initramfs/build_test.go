package initramfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/u-root/u-root/pkg/cpio"
	"golang.org/x/sys/unix"
)

// readArchive decompresses and lists an initramfs.
func readArchive(t *testing.T, file string) map[string]cpio.Record {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	files := make(map[string]cpio.Record, len(recs))
	seen := map[string]bool{".": true}
	for _, r := range recs {
		// The kernel does not create missing parents: each directory
		// must come before what it holds.
		if !seen[path.Dir(r.Name)] {
			t.Errorf("%s comes before its directory", r.Name)
		}
		seen[r.Name] = true
		files[r.Name] = r
	}
	return files
}

func content(t *testing.T, r cpio.Record) []byte {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
	if err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	return b
}

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

func fileSHA(t *testing.T, name string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return sha(b)
}

// TestBuildFakeModules builds an archive from a fake modules tree and
// checks the layout and the cut-down module index.
func TestBuildFakeModules(t *testing.T) {
	dir := t.TempDir()
	modDir := filepath.Join(fakeModules(t, fakeIndex), "") // .../TestX/001
	ver := filepath.Join(dir, "lib", "modules", "6.6.6-test")
	if err := os.MkdirAll(filepath.Dir(ver), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(modDir, ver); err != nil {
		t.Fatal(err)
	}
	initBin := filepath.Join(dir, "init")
	shell := filepath.Join(dir, "sh")
	os.WriteFile(initBin, []byte("\x7fELF init"), 0o755)
	os.WriteFile(shell, []byte("\x7fELF shell"), 0o755)
	out := filepath.Join(dir, "initramfs.cpio.gz")
	err := Build(context.Background(), Options{
		Output: out, Init: initBin, Shell: shell, ModulesDir: ver,
		Modules: []string{"kernel/drivers/net/virtio_net.ko"},
	})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	for _, name := range []string{
		"init", "bin/sh", "dev/console", "etc/resolv.conf", "proc", "sys", "tmp", "run",
		"lib/modules/6.6.6-test/modules.dep",
		"lib/modules/6.6.6-test/kernel/drivers/net/virtio_net.ko.xz",
		"lib/modules/6.6.6-test/kernel/net/core/failover.ko.xz",
	} {
		if _, ok := files[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	if _, ok := files["lib/modules/6.6.6-test/kernel/sound/core/snd.ko.xz"]; ok {
		t.Error("unchosen module in the archive")
	}
	dep := string(content(t, files["lib/modules/6.6.6-test/modules.dep"]))
	if strings.Count(dep, "\n") != 3 || strings.Contains(dep, "r8169") {
		t.Errorf("modules.dep not cut down to the 3 chosen modules:\n%s", dep)
	}
	alias := string(content(t, files["lib/modules/6.6.6-test/modules.alias"]))
	if alias != "alias virtio:d00000001v* virtio_net\n" {
		t.Errorf("modules.alias not cut down:\n%s", alias)
	}
	if st := files["tmp"].Mode; st&0o7777 != 0o1777 {
		t.Errorf("/tmp mode %o", st)
	}
	// A failed build leaves nothing behind.
	err = Build(context.Background(), Options{Output: filepath.Join(dir, "bad.gz"), Init: filepath.Join(dir, "missing")})
	if err == nil {
		t.Error("missing init: no error")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*bad.gz*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestBuildReal builds dolly-init and an initramfs from this machine's
// kernel modules and checks what a netbooted PC needs is inside.
func TestBuildReal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dolly-init and a full initramfs")
	}
	if runtime.GOOS != "linux" {
		t.Skip("dolly-init is Linux only")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH to build dolly-init with")
	}
	modDir, err := hostModulesDir()
	if err != nil {
		t.Skipf("no kernel modules on this machine: %v", err)
	}
	release := filepath.Base(modDir)

	dir := t.TempDir()
	initBin := filepath.Join(dir, "dolly-init")
	cmd := exec.Command(goTool, "build", "-o", initBin, "dolly/initramfs/cmd/dolly-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building dolly-init: %v\n%s", err, out)
	}
	shell := filepath.Join(dir, "sh")
	if err := os.WriteFile(shell, []byte("\x7fELF stand-in shell"), 0o755); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "initramfs.cpio.gz")
	if err := Build(context.Background(), Options{Output: out, Init: initBin, Shell: shell, ModulesDir: modDir}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %.1f MB", out, float64(st.Size())/1e6)
	if st.Size() > 60e6 {
		t.Errorf("initramfs is %.1f MB: too large to netboot a lab quickly", float64(st.Size())/1e6)
	}

	files := readArchive(t, out)
	init, ok := files["init"]
	switch {
	case !ok:
		t.Fatal("no /init")
	case init.Mode&cpio.S_IFMT != cpio.S_IFREG || init.Mode&0o111 == 0:
		t.Errorf("/init mode %o: not an executable file", init.Mode)
	case init.FileSize == 0:
		t.Error("/init is empty")
	case sha(content(t, init)) != fileSHA(t, initBin):
		t.Error("/init differs from the dolly-init built")
	}
	if sh, ok := files["bin/sh"]; !ok || sha(content(t, sh)) != fileSHA(t, shell) || sh.Mode&0o111 == 0 {
		t.Error("/bin/sh missing, not executable or not the shell given")
	}
	if c, ok := files["dev/console"]; !ok || c.Mode&cpio.S_IFMT != cpio.S_IFCHR || c.Rmajor != 5 || c.Rminor != 1 {
		t.Errorf("/dev/console is not the console device: %+v", c.Info)
	}
	root := "lib/modules/" + release
	for _, f := range []string{"modules.dep", "modules.alias"} {
		if _, ok := files[root+"/"+f]; !ok {
			t.Errorf("%s/%s missing", root, f)
		}
	}
	builtin, _ := os.ReadFile(filepath.Join(modDir, "modules.builtin"))
	for _, mod := range []string{"virtio_net", "virtio_blk", "virtio_pci", "nvme", "ahci", "sd_mod", "e1000e"} {
		if !hasModule(files, root, mod) && !strings.Contains(string(builtin), "/"+mod+".ko") {
			t.Errorf("%s neither in the archive nor built in", mod)
		}
	}
	// Modules the archive holds must have their dependencies with them.
	mods, err := ReadModules(modDir)
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		rel, ok := strings.CutPrefix(name, root+"/")
		if !ok || !strings.Contains(rel, ".ko") {
			continue
		}
		for _, d := range mods.deps[rel] {
			if _, ok := files[root+"/"+d]; !ok {
				t.Errorf("%s lacks its dependency %s", rel, d)
			}
		}
	}
}

func hasModule(files map[string]cpio.Record, root, name string) bool {
	for f := range files {
		if strings.HasPrefix(f, root+"/") && strings.Contains(f, ".ko") && ModuleName(f) == name {
			return true
		}
	}
	return false
}

// hostModulesDir returns the modules directory of the running kernel, or
// else the newest one installed (a container runs another kernel than the
// one its /lib/modules is for).
func hostModulesDir() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		dir := filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:]))
		if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err == nil {
			return dir, nil
		}
	}
	deps, err := filepath.Glob("/lib/modules/*/modules.dep")
	if err != nil || len(deps) == 0 {
		return "", fmt.Errorf("no /lib/modules/*/modules.dep")
	}
	slices.SortFunc(deps, compareVersions)
	return filepath.Dir(deps[len(deps)-1]), nil
}
