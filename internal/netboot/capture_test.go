package netboot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dolly/boot"
	"dolly/imaging"
	"dolly/internal/sampleimage"
	"dolly/internal/testenv"
)

// TestNetbootCapture netboots a golden PC (a BIOS qemu machine whose disk
// holds an ext4 file system) from dolly-server -capture -boot: the
// initramfs sends the disk to the server, which stores it, and the PC
// powers off. The stored image decodes to the disk read through its
// block map, and the disk is unchanged.
func TestNetbootCapture(t *testing.T) {
	if os.Getenv("DOLLY_NETBOOT") == "" {
		t.Skip("skipped: boots a qemu machine, minutes: run make netboot-test (or set DOLLY_NETBOOT=1)")
	}
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "ip", "iproute2")
	testenv.RequireProgram(t, "qemu-system-x86_64", "qemu-system-x86")
	testenv.RequireProgram(t, "mkfs.ext4", "e2fsprogs")
	requireFile(t, "/usr/lib/ipxe/qemu/efi-virtio.rom", "needs Debian package ipxe-qemu")
	requireFile(t, boot.DefaultBIOSFile, "needs Debian package ipxe")
	kernel, server, initramfs := netbootFiles(t)

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	dir, err := TempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	disk := filepath.Join(dir, "golden.disk")
	if err := sampleimage.Build(ctx, disk, sampleimage.Spec{Size: imageSize, Files: 24 << 20, Junk: 16 << 20}); err != nil {
		t.Fatalf("building the golden disk: %v", err)
	}
	before, err := digest(disk, imageSize)
	if err != nil {
		t.Fatal(err)
	}
	mapped := mappedDigest(t, disk)

	n, err := NewNet(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	srvLog, err := NewLog(filepath.Join(dir, "dolly-server.log"), time.Now(), "waiting on", "captured ")
	if err != nil {
		t.Fatal(err)
	}
	vm := &VM{Name: "golden", MAC: "52:54:00:12:35:01", Tap: n.Taps[0], Disk: disk}
	if vm.Log, err = NewLog(filepath.Join(dir, "golden.console"), time.Now(), "CAPTURED", "FAILED"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- server:\n%s\n--- golden PC:\n%s", srvLog.Tail(40), vm.Log.Tail(40))
		}
	})
	stored := filepath.Join(dir, "golden.img.zst")
	srvDone := startServer(ctx, t, n, server, srvLog, "waiting on",
		"-capture", "-o", stored,
		"-boot", "-interface", Bridge, "-dhcp-range", fmt.Sprintf("%s-%s", addr(100), addr(150)),
		"-listen", n.Server.String()+":9700",
		"-kernel", kernel, "-initramfs", initramfs,
		"-kernel-args", "console=ttyS0,115200 panic=-1",
		"-after", "poweroff", "-progress-interval", "5s", "-v")
	cmd := n.Command(ctx, "qemu-system-x86_64", append(vm.Args(), "-no-reboot")...)
	cmd.Stdout, cmd.Stderr = vm.Log, vm.Log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	vmDone := make(chan error, 1)
	go func() { vmDone <- cmd.Wait(); vm.Log.Close() }()

	select {
	case err := <-srvDone:
		if err != nil {
			t.Fatalf("dolly-server -capture: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("the capture did not end within %s", deadline)
	}
	select {
	case <-vmDone: // powered off
	case <-ctx.Done():
		t.Fatalf("the golden PC did not power off after the capture")
	}
	if _, ok := vm.Log.At("CAPTURED"); !ok {
		t.Errorf("the golden PC's console does not say it captured its disk")
	}
	if after, _ := digest(disk, imageSize); after != before {
		t.Error("the capture changed the golden disk")
	}
	if got := mappedDigest(t, stored); got != mapped {
		t.Errorf("the stored image decodes to sha256 %s, the golden disk read through its map is %s", got, mapped)
	}
	if lines, _ := srvLog.Lines("captured "); len(lines) > 0 {
		t.Logf("dolly-server: %s", strings.Join(lines, "\n"))
	}
}

// mappedDigest is the sha256 of an image as dolly casts it: a raw one read
// through its block map, a compressed one decoded.
func mappedDigest(t *testing.T, path string) string {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	var r io.Reader = im.Stream()
	if im.Encoding == imaging.Raw {
		m, err := im.ReadMap()
		if err == nil {
			err = im.UseMap(m)
		}
		if err != nil {
			t.Fatal(err)
		}
		r = im.Stream()
	} else {
		dec, err := imaging.NewDecoder(im.Encoding, r)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		r = dec
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
