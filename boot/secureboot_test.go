package boot

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// writePE writes a minimal x86-64 EFI executable: signed, it carries a
// (dummy) certificate table, as a signed loader or kernel does.
func writePE(t *testing.T, dir, name string, signed bool) string {
	t.Helper()
	var b bytes.Buffer
	dos := make([]byte, 64)
	copy(dos, "MZ")
	binary.LittleEndian.PutUint32(dos[0x3c:], 64)
	b.Write(dos)
	b.WriteString("PE\x00\x00")
	opt := pe.OptionalHeader64{Magic: 0x20b, Subsystem: 10, NumberOfRvaAndSizes: 16}
	cert := []byte("a certificate table")
	if signed {
		headers := 64 + 4 + binary.Size(pe.FileHeader{}) + binary.Size(opt)
		opt.DataDirectory[pe.IMAGE_DIRECTORY_ENTRY_SECURITY] = pe.DataDirectory{VirtualAddress: uint32(headers), Size: uint32(len(cert))}
	}
	fh := pe.FileHeader{Machine: pe.IMAGE_FILE_MACHINE_AMD64, SizeOfOptionalHeader: uint16(binary.Size(opt))}
	binary.Write(&b, binary.LittleEndian, fh)
	binary.Write(&b, binary.LittleEndian, opt)
	if signed {
		b.Write(cert)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckSigned(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, path, want string
	}{
		{"signed", writePE(t, dir, "signed.efi", true), ""},
		{"unsigned", writePE(t, dir, "unsigned.efi", false), "is not signed: Secure Boot PCs refuse to start it: FIX"},
		{"not an executable", writeFile(t, dir, "text", 1000), "is not an EFI executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSigned("loader", tt.path, "FIX")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("checkSigned: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("checkSigned: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// Debian's builds, where installed, pass.
	for _, path := range []string{DefaultShimFile, DefaultGrubFile} {
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s not installed: not checked", path)
			continue
		}
		if err := checkSigned("loader", path, "FIX"); err != nil {
			t.Errorf("Debian's %v", err)
		}
	}
}

func TestGrubConfig(t *testing.T) {
	got := GrubConfig("198.18.0.1", []string{"dolly.server=198.18.0.1:9700", "console=ttyS0,115200", "dolly.note=it's $x"})
	want := "set timeout=0\n" +
		"source (tftp,198.18.0.1)/grub/mac-${net_default_mac}.cfg\n" +
		"echo 'dolly: loading the kernel and initramfs'\n" +
		"linux (tftp,198.18.0.1)/vmlinuz dolly.server=198.18.0.1:9700 console=ttyS0,115200 'dolly.note=it'\\''s $x'\n" +
		"initrd (tftp,198.18.0.1)/initramfs\n" +
		"boot\n"
	if got != want {
		t.Errorf("GrubConfig:\n%s\nwant:\n%s", got, want)
	}
	local := GrubLocalConfig("verified at 12:00; $reboot")
	if local != "echo 'dolly: verified at 12:00   reboot: booting the local disk'\nexit 1\n" {
		t.Errorf("GrubLocalConfig: %q", local)
	}
}

func TestGrubFiles(t *testing.T) {
	local := func(mac string) string {
		if mac == "52:54:00:12:34:01" {
			return "verified"
		}
		return ""
	}
	var sent []string
	files := grubFiles("CONFIG", local, func(mac string) { sent = append(sent, mac) })
	tests := []struct {
		name string
		want string // "" for not served
	}{
		{"grub/grub.cfg", "CONFIG"},
		{"grub/mac-52:54:00:12:34:01.cfg", GrubLocalConfig("verified")},
		{"/grub/mac-52:54:00:12:34:01.cfg", ""},    // TFTP takes the slash off
		{"grub/mac-52:54:00:12:34:02.cfg", "\x00"}, // served, empty
		{"grub/mac-52:54:00:12:34.cfg", ""},
		{"grub/mac-52:54:00:12:34:01", ""},
		{"grub/mac-../../etc/passwd.cfg", ""},
		{"grub.cfg", ""},
	}
	for _, tt := range tests {
		f, ok := files(tt.name)
		want, served := strings.TrimPrefix(tt.want, "\x00"), tt.want != ""
		if ok != served || f.text != want {
			t.Errorf("%q: %q, %v; want %q, %v", tt.name, f.text, ok, want, served)
		}
		// Only the local configuration tells, and only once delivered.
		if (f.delivered != nil) != (f.text == GrubLocalConfig("verified")) {
			t.Errorf("%q: delivery told: %v", tt.name, f.delivered != nil)
		}
		if f.delivered != nil {
			f.delivered()
		}
	}
	if !slices.Equal(sent, []string{"52:54:00:12:34:01"}) {
		t.Errorf("told of PCs sent to their disks: %q", sent)
	}
	if got, ok := grubFiles("CONFIG", nil, nil)("grub/mac-52:54:00:12:34:01.cfg"); !ok || got.text != "" || got.delivered != nil {
		t.Errorf("without LocalBoot, a PC's own configuration is %q, %v; want it empty", got.text, ok)
	}
}

func TestNewChecksSecureBootFiles(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config, dir string)
		want   string
	}{
		{"unsigned kernel", func(c *Config, dir string) { c.Kernel = writePE(t, dir, "vmlinuz", false) }, "kernel " + "/"},
		{"missing shim", func(c *Config, dir string) { c.ShimFile = filepath.Join(dir, "gone.efi") }, "install Debian's shim-signed or pass -shim PATH"},
		{"unsigned GRUB", func(c *Config, dir string) { c.GrubFile = writePE(t, dir, "grub.efi", false) }, "is not signed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, dir := secureBootFiles(t)
			tt.change(&c, dir)
			wantNewError(t, c, tt.want)
		})
	}
}

// secureBootFiles is testFiles for -secure-boot: signed stand-ins for the
// kernel, Shim and GRUB, and no iPXE for UEFI.
func secureBootFiles(t *testing.T) (Config, string) {
	c := testFiles(t)
	dir := filepath.Dir(c.Kernel)
	c.SecureBoot = true
	c.EFIFile = ""
	c.Kernel = writePE(t, dir, "vmlinuz.signed", true)
	c.ShimFile = writePE(t, dir, "shimx64.efi.signed", true)
	c.GrubFile = writePE(t, dir, "grubnetx64.efi.signed", true)
	c.Logger = slog.New(slog.DiscardHandler)
	return c, dir
}

// TestServeSecureBoot follows a Secure Boot PC: DHCP offers it Shim, and
// TFTP serves Shim, GRUB and GRUB's configuration, which boots the kernel
// over HTTP; a PC already cloned is sent to its own disk.
func TestServeSecureBoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind to the loopback device")
	}
	cfg, _ := secureBootFiles(t)
	cfg.LocalBoot = func(mac string) string {
		if mac == "52:54:00:00:00:07" {
			return "verified"
		}
		return ""
	}
	_, client, cfg := serveLoopback(t, cfg)

	for _, tt := range []struct {
		arch uint16
		want string
	}{{archEFIX8664, shimName}, {archEFIBC, shimName}, {archBIOS, biosName}} {
		resp := exchange(t, client, cfg.PXEPort, clientPacket(msgRequest, byte(tt.arch)+1, pxe(tt.arch), withCIAddr("127.0.0.100")))
		if resp.MessageType() != msgAck || resp.File != tt.want {
			t.Errorf("architecture %d: type %d, file %q; want %q", tt.arch, resp.MessageType(), resp.File, tt.want)
		}
	}

	receive := func(name string) (string, error) {
		c, err := tftp.NewClient("127.0.0.1:" + strconv.Itoa(cfg.TFTPPort))
		if err != nil {
			return "", err
		}
		c.SetTimeout(5 * time.Second)
		wt, err := c.Receive(name, "octet")
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		_, err = wt.WriteTo(&b)
		return b.String(), err
	}
	for name, path := range map[string]string{shimName: cfg.ShimFile, "/" + grubName: cfg.GrubFile,
		"/vmlinuz": cfg.Kernel, "/initramfs": cfg.Initramfs} {
		got, err := receive(name)
		want, _ := os.ReadFile(path)
		if err != nil || got != string(want) {
			t.Errorf("TFTP %s: %d bytes (%v), want the %d of %s", name, len(got), err, len(want), path)
		}
	}
	for name, want := range map[string]string{
		"/grub/grub.cfg":                  "linux (tftp,127.0.0.1)/vmlinuz dolly.server=127.0.0.1:9700 console=ttyS0,115200 console=tty0\n",
		"/grub/mac-52:54:00:00:00:07.cfg": "booting the local disk'\nexit 1\n",
	} {
		got, err := receive(name)
		if err != nil || !strings.Contains(got, want) {
			t.Errorf("TFTP %s: %q (%v), want it to hold %q", name, got, err, want)
		}
	}
	if got, err := receive("/grub/mac-52:54:00:00:00:08.cfg"); err != nil || got != "" {
		t.Errorf("TFTP: the configuration of a PC to boot the node is %q (%v), want it empty", got, err)
	}
	if _, err := receive(efiName); err == nil {
		t.Errorf("TFTP serves %s under -secure-boot", efiName)
	}
}
