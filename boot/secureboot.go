package boot

import (
	"debug/pe"
	"fmt"
	"regexp"
	"strings"
)

// Secure Boot firmware starts only loaders signed by a key it holds, which
// iPXE is not. Such PCs boot the chain every distribution uses: Shim,
// signed by the UEFI CA that PCs ship with, loads GRUB, signed by the
// distribution, which loads the distribution's signed kernel. The builds
// are Debian's shim-signed and grub-efi-amd64-signed.
const (
	DefaultShimFile = "/usr/lib/shim/shimx64.efi.signed"
	DefaultGrubFile = "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed"

	shimName = "shimx64.efi"
	// Shim loads grubx64.efi from where it came from, over TFTP.
	grubName = "grubx64.efi"
	// GRUB's network image reads its configuration from its prefix,
	// /grub; that configuration reads the PC's own, named by its MAC
	// address (see GrubConfig).
	grubConfigName = "grub/grub.cfg"
	grubMACPrefix  = "grub/mac-"
	// What GRUB loads, over TFTP.
	kernelName, initramfsName = "vmlinuz", "initramfs"
)

// GrubConfig returns the GRUB configuration that boots the kernel and
// initramfs with the kernel command line args, over TFTP from server (an
// IP address): what Script does for iPXE. The signed GRUB holds no HTTP,
// and under Secure Boot it loads no module.
//
// It first reads the PC's own configuration, named by its MAC address,
// which is empty unless the PC is to boot its own disk (GrubLocalConfig):
// GRUB asks for no file by MAC by itself.
func GrubConfig(server string, args []string) string {
	dev := "(tftp," + server + ")"
	var b strings.Builder
	b.WriteString("set timeout=0\n")
	fmt.Fprintf(&b, "source %s/%s${net_default_mac}.cfg\n", dev, grubMACPrefix)
	b.WriteString("echo 'dolly: loading the kernel and initramfs'\n")
	fmt.Fprintf(&b, "linux %s/%s", dev, kernelName)
	for _, a := range args {
		b.WriteString(" " + grubQuote(a))
	}
	fmt.Fprintf(&b, "\ninitrd %s/%s\nboot\n", dev, initramfsName)
	return b.String()
}

// GrubLocalConfig returns the GRUB configuration that has a PC boot its
// own disk, saying why: GRUB exits, and the firmware goes on to its next
// boot option, as it does when iPXE exits (LocalScript).
func GrubLocalConfig(why string) string {
	return "echo " + grubQuote("dolly: "+strings.Map(plainRune, why)+": booting the local disk") + "\nexit 1\n"
}

// grubQuote quotes s as one word of GRUB's script language. Within single
// quotes nothing is special but the quote itself, which closes the
// quotes, is escaped with a backslash, and opens them again.
func grubQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !safeWordRune(r) }) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func safeWordRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("=,.:/_-+@%", r)
}

// macName matches the MAC address of grub/mac-MAC.cfg, as GRUB writes it.
var macName = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)

// A generatedFile is a file TFTP makes up on request; delivered, if set,
// is called once the client has it all.
type generatedFile struct {
	text      string
	delivered func()
}

// grubFiles returns what TFTP serves to GRUB under the names it asks for:
// the configuration, and each PC's own, which local, if set, fills for a
// PC that is to boot its disk; sent, if set, is told once it has it.
func grubFiles(config string, local func(mac string) string, sent func(mac string)) func(name string) (generatedFile, bool) {
	return func(name string) (generatedFile, bool) {
		if name == grubConfigName {
			return generatedFile{text: config}, true
		}
		mac, ok := strings.CutPrefix(name, grubMACPrefix)
		mac, cfg := strings.CutSuffix(mac, ".cfg")
		mac = strings.ToLower(mac)
		if !ok || !cfg || !macName.MatchString(mac) {
			return generatedFile{}, false
		}
		if local != nil {
			if why := local(mac); why != "" {
				f := generatedFile{text: GrubLocalConfig(why)}
				if sent != nil {
					f.delivered = func() { sent(mac) }
				}
				return f, true
			}
		}
		return generatedFile{}, true
	}
}

// checkSigned checks that path is an EFI executable that carries a
// signature: a Secure Boot PC refuses to start anything else, and says
// little about why on its screen.
func checkSigned(what, path, fix string) error {
	f, err := pe.Open(path)
	if err != nil {
		return fmt.Errorf("%s %s is not an EFI executable: %w: %s", what, path, err, fix)
	}
	defer f.Close()
	var dirs []pe.DataDirectory
	switch h := f.OptionalHeader.(type) {
	case *pe.OptionalHeader64:
		dirs = h.DataDirectory[:min(h.NumberOfRvaAndSizes, 16)]
	case *pe.OptionalHeader32:
		dirs = h.DataDirectory[:min(h.NumberOfRvaAndSizes, 16)]
	}
	if len(dirs) <= pe.IMAGE_DIRECTORY_ENTRY_SECURITY || dirs[pe.IMAGE_DIRECTORY_ENTRY_SECURITY].Size == 0 {
		return fmt.Errorf("%s %s is not signed: Secure Boot PCs refuse to start it: %s", what, path, fix)
	}
	return nil
}
