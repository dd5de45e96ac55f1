package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The netboot flags refuse what they would silently ignore.
func TestBootFlagsCheck(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for accepted
	}{
		{[]string{"-boot", "-secure-boot", "-after", "reboot"}, ""},
		{[]string{"-boot", "-secure-boot", "-shim", "/x/shim.efi", "-grub", "/x/grub.efi"}, ""},
		{[]string{"-secure-boot"}, "-secure-boot needs -boot"},
		{[]string{"-boot", "-shim", "/x/shim.efi"}, "-shim needs -secure-boot"},
		{[]string{"-boot", "-grub", "/x/grub.efi"}, "-grub needs -secure-boot"},
		{[]string{"-boot", "-secure-boot", "-ipxe-efi", "/x/ipxe.efi"}, "-ipxe-efi is not used with -secure-boot"},
		{[]string{"-boot", "-after", "dance"}, `-after "dance"`},
		{[]string{"-boot", "-kernel-arm64", "/x/vmlinuz", "-initramfs-arm64", "/x/initramfs"}, ""},
		{[]string{"-boot", "-kernel-arm64", "/x/vmlinuz"}, "-kernel-arm64 and -initramfs-arm64 go together"},
		{[]string{"-boot", "-initramfs-arm64", "/x/initramfs"}, "-kernel-arm64 and -initramfs-arm64 go together"},
		{[]string{"-boot", "-ipxe-arm64", "/x/ipxe.efi"}, "-ipxe-arm64 needs -kernel-arm64"},
		{[]string{"-kernel-arm64", "/x/vmlinuz", "-initramfs-arm64", "/x/initramfs"}, "needs -boot"},
	}
	for _, tt := range tests {
		fs := pflag.NewFlagSet("dolly-server", pflag.ContinueOnError)
		b := addBootFlags(fs)
		args := make([]string, len(tt.args))
		for i, a := range tt.args {
			if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") {
				a = "-" + a // pflag's long form
			}
			args[i] = a
		}
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		_, err := b.check()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
