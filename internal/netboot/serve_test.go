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
	requireNetboot(t, boot.DefaultBIOSFile, "ipxe")
	kernel, server, initramfs := netbootFiles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, n := oneVMLab(ctx, t)
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
	srvLog := serveLab(ctx, cancel, t, n, dir, server, "serving the images",
		"-serve", "-images", lib, "-groups", groups,
		"-boot", "-interface", Bridge,
		"-dhcp-range", fmt.Sprintf("%s-%s", addr(100), addr(150)),
		"-listen", n.Server.String()+":9700",
		"-kernel", kernel, "-initramfs", initramfs,
		"-kernel-args", "console=ttyS0,115200 panic=-1", "-target", "disk:first", "-v")
	vm := &VM{Name: "pc01", MAC: mac, Tap: n.Taps[0], Disk: filepath.Join(dir, "pc01.disk")}
	var err error
	if err := blankDisk(vm.Disk, diskSize); err != nil {
		t.Fatal(err)
	}
	if err := writeBootSector(vm.Disk); err != nil {
		t.Fatal(err)
	}
	if vm.Log, err = NewLog(filepath.Join(dir, "pc01.console"), time.Now(), diskText, "Linux version"); err != nil {
		t.Fatal(err)
	}
	watchVM(ctx, t, n, vm, diskText, "Linux version", "the PC booted into the node with no cast queued")
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

// watchVM boots vm and waits until its console shows want, failing the
// test if it shows never first (saying so with why), if qemu stops, or if
// ctx ends; then it stops the VM. vm.Log must watch for want and never.
func watchVM(ctx context.Context, t *testing.T, n *Net, vm *VM, want, never, why string) {
	t.Helper()
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
	case <-vm.Log.Seen(want):
	case <-vm.Log.Seen(never):
		t.Error(why)
	case err := <-vmDone:
		vmDone <- err
		t.Errorf("qemu stopped (%v) before %s showed %q", err, vm.Name, want)
	case <-ctx.Done():
		t.Errorf("%s did not show %q within the time", vm.Name, want)
	}
	cmd.Process.Kill()
	<-vmDone
}

// requireNetboot skips a netboot test unless make netboot-test runs it, as
// root, with iproute2, qemu and the files named (path, Debian package
// pairs).
func requireNetboot(t *testing.T, files ...string) {
	t.Helper()
	if os.Getenv("DOLLY_NETBOOT") == "" {
		t.Skip("skipped: boots a qemu machine: run make netboot-test (or set DOLLY_NETBOOT=1)")
	}
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "ip", "iproute2")
	testenv.RequireProgram(t, "qemu-system-x86_64", "qemu-system-x86")
	for i := 0; i+1 < len(files); i += 2 {
		requireFile(t, files[i], "needs Debian package "+files[i+1])
	}
}

// oneVMLab makes a scratch directory and a lab network with one tap, both
// removed when the test ends.
func oneVMLab(ctx context.Context, t *testing.T) (string, *Net) {
	t.Helper()
	dir, err := TempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n, err := NewNet(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	return dir, n
}

// serveLab starts dolly-server with args in the lab until ready shows in
// its log (dir/dolly-server.log), and stops it (cancel) when the test
// ends, showing its log's end if the test failed.
func serveLab(ctx context.Context, cancel context.CancelFunc, t *testing.T, n *Net, dir, server, ready string, args ...string) *Log {
	t.Helper()
	log, err := NewLog(filepath.Join(dir, "dolly-server.log"), time.Now(), ready)
	if err != nil {
		t.Fatal(err)
	}
	done := startServer(ctx, t, n, server, log, ready, args...)
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("--- dolly-server (last 30 lines):\n%s", log.Tail(30))
		}
	})
	return log
}
