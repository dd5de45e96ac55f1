package netboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/boot"
)

// TestNetbootSecureBootRefusesTamperedKernel netboots a UEFI PC that
// enforces Secure Boot with a kernel whose signature no longer matches
// its bytes (one byte changed, the signature kept, so dolly-server's own
// check, which sees a signature, lets it through): GRUB, through Shim,
// must refuse to start it, and the PC never reaches Linux.
func TestNetbootSecureBootRefusesTamperedKernel(t *testing.T) {
	requireNetboot(t, OVMFSecureCode, "ovmf", OVMFSecureVars, "ovmf", boot.DefaultShimFile, "shim-signed",
		boot.DefaultGrubFile, "grub-efi-amd64-signed", boot.DefaultBIOSFile, "ipxe")
	kernel, server, initramfs := netbootFiles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, n := oneVMLab(ctx, t)
	tampered := filepath.Join(dir, "vmlinuz")
	if err := tamper(tampered, kernel); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "image")
	if err := blankDisk(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	srvLog := serveLab(ctx, cancel, t, n, dir, server, "waiting for",
		"-boot", "-secure-boot", "-interface", Bridge,
		"-dhcp-range", fmt.Sprintf("%s-%s", addr(100), addr(150)),
		"-listen", n.Server.String()+":9700",
		"-kernel", tampered, "-initramfs", initramfs,
		"-kernel-args", "console=ttyS0,115200 panic=-1",
		"-image", img, "-chain", "-nodes", "1", "-target", "disk:first", "-yes", "-v")
	const refused = "bad shim signature"
	vm := &VM{Name: "pc01", MAC: "52:54:00:12:34:01", Tap: n.Taps[0], Disk: filepath.Join(dir, "pc01.disk"),
		UEFIVars: filepath.Join(dir, "pc01.vars"), SecureBoot: true}
	if err := blankDisk(vm.Disk, diskSize); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(vm.UEFIVars, OVMFSecureVars); err != nil {
		t.Fatal(err)
	}
	var err error
	if vm.Log, err = NewLog(filepath.Join(dir, "pc01.console"), time.Now(), refused, "Linux version"); err != nil {
		t.Fatal(err)
	}
	watchVM(ctx, t, n, vm, refused, "Linux version", "the PC started the tampered kernel under Secure Boot")
	if t.Failed() {
		t.Logf("--- %s console (last 30 lines):\n%s", vm.Name, vm.Log.Tail(30))
		return
	}
	at, _ := vm.Log.At(refused)
	loaded, _ := srvLog.Lines("msg=tftp file=/vmlinuz")
	if len(loaded) == 0 {
		t.Errorf("the server's log shows no TFTP transfer of the kernel: the refusal was not of it")
	}
	if console, _ := os.ReadFile(vm.Log.path); strings.Contains(string(console), "Linux version") {
		t.Errorf("the console shows Linux starting")
	}
	t.Logf("%s: GRUB refused the tampered kernel after %s (%q)", vm.Name, at.Round(time.Second), refused)
}

// tamper copies the kernel from to to with one byte in its middle
// changed: the signature it carries no longer matches.
func tamper(to, from string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	b[len(b)/2] ^= 0xff
	return os.WriteFile(to, b, 0o644)
}
