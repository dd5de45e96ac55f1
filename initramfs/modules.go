package initramfs

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultModules are the parts of a kernel's modules tree a lab PC needs to
// reach the network and its disks: NICs (wired, USB and the usual virtual
// ones), disk controllers and the buses they hang on. A pattern ending in
// "/" takes a whole subtree; any other is matched against a module's path
// (without its compression suffix) as with path.Match. Dependencies are
// added by Modules.Select.
func DefaultModules() []string {
	return []string{
		// NICs.
		"kernel/drivers/net/ethernet/",
		"kernel/drivers/net/phy/",
		"kernel/drivers/net/usb/",
		"kernel/drivers/net/virtio_net.ko",
		"kernel/drivers/net/vmxnet3/",
		"kernel/drivers/net/hyperv/",
		// Disks and their controllers.
		"kernel/drivers/ata/",
		"kernel/drivers/nvme/host/",
		"kernel/drivers/scsi/*.ko", // sd_mod, virtio_scsi, ...; not the big HBA subtrees
		"kernel/drivers/block/",
		"kernel/drivers/mmc/",
		"kernel/drivers/pci/controller/", // Intel VMD hides NVMe disks behind it
		// Buses.
		"kernel/drivers/virtio/",
		"kernel/drivers/hv/",
		"kernel/drivers/usb/host/",
		// Entropy: DHCP needs random numbers, and a machine without a
		// CPU random instruction may otherwise wait minutes for them.
		"kernel/drivers/char/hw_random/",
	}
}

// Modules is the index of a kernel's modules directory
// (/lib/modules/VERSION): which modules there are, what each one needs and
// which devices each one drives.
type Modules struct {
	Dir   string
	paths []string            // module paths relative to Dir, in modules.dep order
	deps  map[string][]string // module path → paths of the modules it needs
	// byName maps a module name (with "_", as the kernel names modules) to
	// its path.
	byName map[string]string
	// softdeps maps a module name to the names or aliases of the modules
	// to load before ("pre") and after ("post") it.
	softPre, softPost map[string][]string
	aliases           []moduleAlias
}

// moduleAlias is one line of modules.alias: a device pattern and the module
// that drives matching devices.
type moduleAlias struct {
	pattern string
	module  string
}

// ModuleName returns the name the kernel gives the module at path p:
// "kernel/drivers/net/virtio_net.ko.xz" is "virtio_net".
func ModuleName(p string) string {
	base := path.Base(filepath.ToSlash(p))
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// stripCompression removes a module path's compression suffix.
func stripCompression(p string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if s, ok := strings.CutSuffix(p, ".ko"+ext); ok {
			return s + ".ko"
		}
	}
	return p
}

// ReadModules reads the index files of a modules directory: modules.dep
// (required), and modules.alias and modules.softdep when present.
func ReadModules(dir string) (*Modules, error) {
	m := &Modules{
		Dir:      dir,
		deps:     make(map[string][]string),
		byName:   make(map[string]string),
		softPre:  make(map[string][]string),
		softPost: make(map[string][]string),
	}
	err := eachLine(filepath.Join(dir, "modules.dep"), func(line string) error {
		mod, deps, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("no colon in %q", line)
		}
		mod = strings.TrimSpace(mod)
		m.paths = append(m.paths, mod)
		m.deps[mod] = strings.Fields(deps)
		m.byName[ModuleName(mod)] = mod
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = eachLine(filepath.Join(dir, "modules.alias"), func(line string) error {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "alias" {
			m.aliases = append(m.aliases, moduleAlias{pattern: f[1], module: ModuleName(f[2])})
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	// "softdep MODULE pre: A B post: C"
	err = eachLine(filepath.Join(dir, "modules.softdep"), func(line string) error {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "softdep" {
			return nil
		}
		mod, list := ModuleName(f[1]), &m.softPre
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				list = &m.softPre
			case "post:":
				list = &m.softPost
			default:
				(*list)[mod] = append((*list)[mod], w)
			}
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return m, nil
}

// eachLine calls fn for each line of a file that is neither blank nor a
// comment.
func eachLine(file string, fn func(string) error) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	return nil
}

// Has reports whether the directory holds a module of that name.
func (m *Modules) Has(name string) bool {
	_, ok := m.byName[ModuleName(name)]
	return ok
}

// Path returns the path of the named module relative to m.Dir.
func (m *Modules) Path(name string) (string, bool) {
	p, ok := m.byName[ModuleName(name)]
	return p, ok
}

// MatchAlias returns the modules that drive a device, given the content
// of its sysfs modalias file, in modules.alias order.
func (m *Modules) MatchAlias(modalias string) []string {
	var names []string
	for _, a := range m.aliases {
		if ok, _ := path.Match(a.pattern, modalias); ok && !slices.Contains(names, a.module) {
			names = append(names, a.module)
		}
	}
	return names
}

// Resolve turns a name as modules.softdep and request_module use it, a
// module name or an alias ("crypto-crc32c", "platform:idma64"), into
// module names. A name the directory does not hold (built in, or absent)
// resolves to nothing.
func (m *Modules) Resolve(name string) []string {
	if m.Has(name) {
		return []string{ModuleName(name)}
	}
	return m.MatchAlias(name)
}

// SoftPre returns the modules modules.softdep asks to load before the
// named one.
func (m *Modules) SoftPre(name string) []string {
	var names []string
	for _, s := range m.softPre[ModuleName(name)] {
		names = append(names, m.Resolve(s)...)
	}
	return names
}

// Select returns the paths (relative to m.Dir, in modules.dep order) of
// the modules that match any of the patterns (see DefaultModules), plus
// everything they need: the modules they depend on and their soft
// dependencies, recursively.
func (m *Modules) Select(patterns []string) ([]string, error) {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("module pattern %q: %w", p, err)
		}
	}
	chosen := make(map[string]bool)
	var add func(p string)
	add = func(p string) {
		if chosen[p] {
			return
		}
		if _, ok := m.deps[p]; !ok {
			return // not in modules.dep: nothing to add
		}
		chosen[p] = true
		for _, d := range m.deps[p] {
			add(d)
		}
		name := ModuleName(p)
		for _, s := range append(slices.Clone(m.softPre[name]), m.softPost[name]...) {
			for _, n := range m.Resolve(s) {
				add(m.byName[n])
			}
		}
	}
	for _, p := range m.paths {
		if matchModule(patterns, p) {
			add(p)
		}
	}
	var out []string
	for _, p := range m.paths {
		if chosen[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

// matchModule reports whether a module path matches one of the patterns.
func matchModule(patterns []string, p string) bool {
	bare := stripCompression(p)
	for _, pat := range patterns {
		if strings.HasSuffix(pat, "/") {
			if strings.HasPrefix(p, pat) {
				return true
			}
			continue
		}
		if ok, _ := path.Match(pat, bare); ok {
			return true
		}
	}
	return false
}
