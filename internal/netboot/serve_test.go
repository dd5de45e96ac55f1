package netboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"dolly/boot"
	"dolly/internal/testenv"
)

// TestNetbootServeBootsTheDisk runs dolly-server as a lab service with no
// cast queued: a listed BIOS PC that netboots is sent to its own disk,
// whose boot sector says so on the console.
func TestNetbootServeBootsTheDisk(t *testing.T) {
	if os.Getenv("DOLLY_NETBOOT") == "" {
		t.Skip("skipped: boots a qemu machine: run make netboot-test (or set DOLLY_NETBOOT=1)")
	}
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "ip", "iproute2")
	testenv.RequireProgram(t, "qemu-system-x86_64", "qemu-system-x86")
	requireFile(t, boot.DefaultBIOSFile, "needs Debian package ipxe")
	kernel, server, initramfs := netbootFiles(t)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := TempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lib := filepath.Join(dir, "images")
	os.Mkdir(lib, 0o755)
	if err := blankDisk(filepath.Join(lib, "nt.img"), 1<<20); err != nil {
		t.Fatal(err)
	}
	const mac = "52:54:00:12:34:01"
	groups := filepath.Join(dir, "groups")
	if err := os.WriteFile(groups, []byte("lab1: "+mac+"\n"), 0o644); err != nil {
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
	const ready = "serving the images"
	srvLog, err := NewLog(filepath.Join(dir, "dolly-server.log"), time.Now(), ready)
	if err != nil {
		t.Fatal(err)
	}
	srvDone := startServer(ctx, t, n, server, srvLog, ready,
		"-serve", "-images", lib, "-groups", groups,
		"-boot", "-interface", Bridge,
		"-dhcp-range", fmt.Sprintf("%s-%s", addr(100), addr(150)),
		"-listen", n.Server.String()+":9700",
		"-kernel", kernel, "-initramfs", initramfs,
		"-kernel-args", "console=ttyS0,115200 panic=-1", "-target", "disk:first", "-v")
	t.Cleanup(func() {
		cancel()
		<-srvDone
		if t.Failed() {
			t.Logf("--- dolly-server (last 30 lines):\n%s", srvLog.Tail(30))
		}
	})
	vm := &VM{Name: "pc01", MAC: mac, Tap: n.Taps[0], Disk: filepath.Join(dir, "pc01.disk")}
	if err := blankDisk(vm.Disk, diskSize); err != nil {
		t.Fatal(err)
	}
	if err := writeBootSector(vm.Disk); err != nil {
		t.Fatal(err)
	}
	if vm.Log, err = NewLog(filepath.Join(dir, "pc01.console"), time.Now(), diskText, "Linux version"); err != nil {
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
	case <-vm.Log.Seen(diskText):
	case <-vm.Log.Seen("Linux version"):
		t.Errorf("the PC booted into the node with no cast queued")
	case err := <-vmDone:
		vmDone <- err
		t.Errorf("qemu stopped (%v) before the PC booted its disk", err)
	case <-ctx.Done():
		t.Errorf("the PC did not boot its disk within the time")
	}
	cmd.Process.Kill()
	<-vmDone
	if t.Failed() {
		t.Logf("--- %s console (last 30 lines):\n%s", vm.Name, vm.Log.Tail(30))
		return
	}
	if lines, _ := srvLog.Lines("no cast is queued"); len(lines) == 0 {
		t.Errorf("the server's log does not say why the PC went to its disk")
	}
	at, _ := vm.Log.At(diskText)
	t.Logf("%s: booted its own disk after %s with no cast queued", vm.Name, at.Round(time.Second))
}
