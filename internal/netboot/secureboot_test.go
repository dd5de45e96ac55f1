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
	"dolly/internal/testenv"
)

// TestNetbootSecureBootRefusesTamperedKernel netboots a UEFI PC that
// enforces Secure Boot with a kernel whose signature no longer matches
// its bytes (one byte changed, the signature kept, so dolly-server's own
// check, which sees a signature, lets it through): GRUB, through Shim,
// must refuse to start it, and the PC never reaches Linux.
func TestNetbootSecureBootRefusesTamperedKernel(t *testing.T) {
	if os.Getenv("DOLLY_NETBOOT") == "" {
		t.Skip("skipped: boots a qemu machine: run make netboot-test (or set DOLLY_NETBOOT=1)")
	}
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "ip", "iproute2")
	testenv.RequireProgram(t, "qemu-system-x86_64", "qemu-system-x86")
	requireFile(t, OVMFSecureCode, "needs Debian package ovmf")
	requireFile(t, OVMFSecureVars, "needs Debian package ovmf")
	requireFile(t, boot.DefaultShimFile, "needs Debian package shim-signed")
	requireFile(t, boot.DefaultGrubFile, "needs Debian package grub-efi-amd64-signed")
	requireFile(t, boot.DefaultBIOSFile, "needs Debian package ipxe")
	kernel, server, initramfs := netbootFiles(t)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := TempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tampered := filepath.Join(dir, "vmlinuz")
	if err := tamper(tampered, kernel); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "image")
	if err := blankDisk(img, 1<<20); err != nil {
		t.Fatal(err)
	}

	n, err := NewNet(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	srvLog, err := NewLog(filepath.Join(dir, "dolly-server.log"), time.Now(), "waiting for")
	if err != nil {
		t.Fatal(err)
	}
	srvDone := startServer(ctx, t, n, server, srvLog, "waiting for",
		"-boot", "-secure-boot", "-interface", Bridge,
		"-dhcp-range", fmt.Sprintf("%s-%s", addr(100), addr(150)),
		"-listen", n.Server.String()+":9700",
		"-kernel", tampered, "-initramfs", initramfs,
		"-kernel-args", "console=ttyS0,115200 panic=-1",
		"-image", img, "-chain", "-nodes", "1", "-target", "disk:first", "-yes", "-v")
	t.Cleanup(func() {
		cancel()
		<-srvDone
		if t.Failed() {
			t.Logf("--- dolly-server (last 30 lines):\n%s", srvLog.Tail(30))
		}
	})
	const refused = "bad shim signature"
	vm := &VM{Name: "pc01", MAC: "52:54:00:12:34:01", Tap: n.Taps[0], Disk: filepath.Join(dir, "pc01.disk"),
		UEFIVars: filepath.Join(dir, "pc01.vars"), SecureBoot: true}
	if err := blankDisk(vm.Disk, diskSize); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(vm.UEFIVars, OVMFSecureVars); err != nil {
		t.Fatal(err)
	}
	if vm.Log, err = NewLog(filepath.Join(dir, "pc01.console"), time.Now(), refused, "Linux version"); err != nil {
		t.Fatal(err)
	}
	cmd := n.Command(ctx, "qemu-system-x86_64", vm.Args()...)
	cmd.Stdout, cmd.Stderr = vm.Log, vm.Log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", vm.Name, err)
	}
	vmDone := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		vm.Log.Close()
		vmDone <- err
	}()
	select {
	case <-vm.Log.Seen(refused):
	case <-vm.Log.Seen("Linux version"):
		t.Errorf("the PC started the tampered kernel under Secure Boot")
	case err := <-vmDone:
		vmDone <- err
		t.Errorf("qemu stopped (%v) before GRUB refused the kernel", err)
	case <-ctx.Done():
		t.Errorf("GRUB did not refuse the tampered kernel within the time")
	}
	cmd.Process.Kill()
	<-vmDone
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
