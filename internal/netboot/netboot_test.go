package netboot

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"dolly/boot"
	"dolly/dolly/castkey"
	"dolly/internal/sampleimage"
	"dolly/internal/testenv"
)

const (
	imageSize = 64 << 20
	diskSize  = 80 << 20
	// deadline bounds the whole cast, from building the image to the
	// last machine powering off; CI gives the test 10 minutes.
	deadline = 9 * time.Minute
)

// milestones are what a machine's console shows on its way, in order:
// the name the timeline gives each and the text that marks it. A line is
// stamped when it ends: iPXE ends the initramfs line once the download
// is done, and the kernel's first line shows once its serial console is
// up, after the kernel has unpacked itself. iPXE reports its network
// configured only after some 16 s: it waits in vain for an IPv6 router.
var milestones = []struct{ name, text string }{
	{"iPXE configured", "Filename:"},
	{"GRUB configured", "dolly: loading the kernel"},
	{"kernel+initramfs loaded", "/initramfs..."},
	{"Linux console", "Linux version"},
	{"drivers", "drivers loaded"},
	{"lease", `msg="DHCP lease"`},
	{"joined", "msg=joined"},
	{"verified", verifiedText},
	{"reboot", "reboot: Restarting system"},
	{"sent to its disk", localText},
	{"disk booted", diskText},
}

const (
	verifiedText = "cast VERIFIED"
	// localText is what iPXE echoes when the server sends a PC to its
	// own disk (boot.LocalScript); diskText is what the image's boot
	// sector prints once a BIOS PC boots it (bootSector).
	localText = "booting the local disk"
	diskText  = "DOLLY-DISK-BOOTED"
)

// firmware is what a test machine boots with.
type firmware int

const (
	bios       firmware = iota // SeaBIOS and QEMU's iPXE ROM
	uefi                       // OVMF, whose own PXE fetches ipxe.efi
	secureBoot                 // OVMF enforcing Secure Boot: Shim, GRUB and a signed kernel
)

func (f firmware) String() string {
	return [...]string{"BIOS", "UEFI", "UEFI Secure Boot"}[f]
}

// TestNetbootCast PXE-boots three qemu machines with blank disks from
// dolly-server -boot (full DHCP), has them clone an ext4 image along a
// chain and reboot, and checks every disk against the image. The last
// machine is a UEFI PC (OVMF, whose own PXE fetches ipxe.efi), the others
// BIOS PCs (SeaBIOS and QEMU's iPXE ROM). Rebooted, each netboots again,
// as a PC whose firmware keeps the network first does: the server sends
// it to its own disk, and the BIOS PCs boot the image's boot sector.
func TestNetbootCast(t *testing.T) {
	runNetboot(t, []firmware{bios, bios, uefi})
}

// TestNetbootSecureBoot does the same with one UEFI PC that enforces
// Secure Boot, from dolly-server -boot -secure-boot: its firmware accepts
// Shim, which accepts GRUB, which accepts Debian's kernel.
func TestNetbootSecureBoot(t *testing.T) {
	requireFile(t, OVMFSecureCode, "needs Debian package ovmf")
	requireFile(t, OVMFSecureVars, "needs Debian package ovmf")
	requireFile(t, boot.DefaultShimFile, "needs Debian package shim-signed")
	requireFile(t, boot.DefaultGrubFile, "needs Debian package grub-efi-amd64-signed")
	runNetboot(t, []firmware{secureBoot}, "-secure-boot")
}

// runNetboot netboots a machine of each kind from dolly-server -boot with
// serverArgs, casts an image to them and checks it (see TestNetbootCast).
func runNetboot(t *testing.T, kinds []firmware, serverArgs ...string) {
	if os.Getenv("DOLLY_NETBOOT") == "" {
		t.Skipf("skipped: boots %d qemu machines, minutes: run make netboot-test (or set DOLLY_NETBOOT=1)", len(kinds))
	}
	nodes := len(kinds)
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "ip", "iproute2")
	testenv.RequireProgram(t, "qemu-system-x86_64", "qemu-system-x86")
	testenv.RequireProgram(t, "mkfs.ext4", "e2fsprogs")
	// QEMU's iPXE ROM for virtio-net does the PXE boot; dolly-server
	// wants Debian's ipxe files to serve to machines without iPXE.
	requireFile(t, "/usr/lib/ipxe/qemu/efi-virtio.rom", "needs Debian package ipxe-qemu")
	requireFile(t, boot.DefaultBIOSFile, "needs Debian package ipxe")
	requireFile(t, boot.DefaultEFIFile, "needs Debian package ipxe")
	requireFile(t, OVMFCode, "needs Debian package ovmf")
	requireFile(t, OVMFVars, "needs Debian package ovmf")
	kernel, server, initramfs := netbootFiles(t)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	dir, err := TempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	img := filepath.Join(dir, "image.ext4")
	if err := sampleimage.Build(ctx, img, sampleimage.Spec{Size: imageSize, Files: 40 << 20}); err != nil {
		t.Fatalf("building the image: %v", err)
	}
	if err := writeBootSector(img); err != nil {
		t.Fatal(err)
	}
	want, err := digest(img, imageSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image: ext4, %d MiB, sha256 %s; kernel %s, initramfs %s", imageSize>>20, want, kernel, initramfs)

	n, err := NewNet(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})

	var logs []*Log // shown on failure
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range logs {
				t.Logf("--- %s (last 40 lines):\n%s", l.path, l.Tail(40))
			}
		}
	})

	// A keyed cast: the machines hold no key, only the server's public
	// key on their command line, and enroll; -allow admits them by MAC.
	key := castkey.NewKey()
	keyFile := filepath.Join(dir, "cast.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	serverKey := castkey.ServerKey(key.Identity().Public().(ed25519.PublicKey))

	srvLog, err := NewLog(filepath.Join(dir, "dolly-server.log"), time.Now(), "waiting for")
	if err != nil {
		t.Fatal(err)
	}
	logs = append(logs, srvLog)
	srvDone := startServer(ctx, t, n, server, srvLog, "waiting for", append([]string{
		"-boot", "-interface", Bridge,
		"-dhcp-range", fmt.Sprintf("%s-%s", addr(100), addr(150)),
		"-listen", n.Server.String() + ":9700",
		"-kernel", kernel, "-initramfs", initramfs,
		// The serial port last, so that it is /dev/console and dolly-init
		// logs where the test reads; a kernel panic reboots at once.
		"-kernel-args", "console=ttyS0,115200 panic=-1",
		"-image", img, "-chain", "-nodes", fmt.Sprint(nodes), "-target", "disk:first",
		"-after", "reboot", "-yes",
		"-key", keyFile, "-allow", "52:54:00:12:34:*",
		// Guests emulated on a busy 2-core machine may go quiet for
		// seconds; that is not what this test is about.
		"-node-timeout", "30s",
		"-v"}, // DHCP and HTTP requests too, for the log shown on failure
		serverArgs...)...)
	// What anyone on the network can fetch holds the server's public key,
	// never the cast key.
	script, err := fetch(ctx, n, "/boot.ipxe?mac=52:54:00:12:34:99")
	if err != nil {
		t.Fatalf("fetching the iPXE script: %v", err)
	}
	if !strings.Contains(script, "dolly.serverkey="+serverKey) || strings.Contains(script, string(key)) {
		t.Fatalf("the iPXE script lacks the server key or holds the cast key:\n%s", script)
	}

	vms := make([]*VM, nodes)
	type exit struct {
		vm  *VM
		err error
	}
	vmDone := make(chan exit, nodes)
	texts := make([]string, len(milestones))
	for i, m := range milestones {
		texts[i] = m.text
	}
	// GRUB's prompt: it found nothing it could boot, and waits for a
	// user who will not come.
	const grubPrompt = "grub> "
	texts = append(texts, grubPrompt)
	for i := range vms {
		vm := &VM{
			Name: fmt.Sprintf("pc%02d", i+1),
			MAC:  fmt.Sprintf("52:54:00:12:34:%02x", i+1),
			Tap:  n.Taps[i],
			Disk: filepath.Join(dir, fmt.Sprintf("pc%02d.disk", i+1)),
		}
		vms[i] = vm
		if err := blankDisk(vm.Disk, diskSize); err != nil {
			t.Fatal(err)
		}
		if kinds[i] != bios {
			vm.UEFIVars = filepath.Join(dir, vm.Name+".vars")
			vm.SecureBoot = kinds[i] == secureBoot
			vars := OVMFVars
			if vm.SecureBoot {
				vars = OVMFSecureVars
			}
			if err := copyFile(vm.UEFIVars, vars); err != nil {
				t.Fatal(err)
			}
		}
		if vm.Log, err = NewLog(filepath.Join(dir, vm.Name+".console"), time.Now(), texts...); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, vm.Log)
		cmd := n.Command(ctx, "qemu-system-x86_64", vm.Args()...)
		cmd.Stdout, cmd.Stderr = vm.Log, vm.Log
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", vm.Name, err)
		}
		// Rebooted, a machine ends where it should: a BIOS PC in the
		// image's boot sector, a UEFI one (the image has no EFI system
		// partition) once iPXE, or GRUB under Secure Boot, says it sends
		// it to its disk.
		done := diskText
		if kinds[i] != bios {
			done = localText
		}
		go func() {
			select {
			case <-vm.Log.Seen(done):
				cmd.Process.Kill()
			case <-vm.Log.Seen(grubPrompt):
				cmd.Process.Kill()
			case <-ctx.Done():
			}
		}()
		go func() {
			err := cmd.Wait()
			vm.Log.Close()
			vmDone <- exit{vm, err}
		}()
	}

	// Wait for the server and every machine. The first failure stops
	// the rest: what fails after it is its consequence.
	fail := func(format string, args ...any) {
		if ctx.Err() == nil {
			t.Errorf(format, args...)
			cancel()
		}
	}
	for running := nodes; srvDone != nil || running > 0; {
		select {
		case err := <-srvDone:
			srvDone = nil
			if err != nil {
				fail("dolly-server: %v", err)
			}
		case e := <-vmDone:
			running--
			_, verified := e.vm.Log.At(verifiedText)
			_, local := e.vm.Log.At(localText)
			_, booted := e.vm.Log.At(diskText)
			switch {
			case !verified:
				fail("%s stopped without verifying its disk (qemu: %v)", e.vm.Name, e.err)
			case !local:
				fail("%s was not sent to its own disk when it netbooted again (qemu: %v)", e.vm.Name, e.err)
			case kinds[slices.Index(vms, e.vm)] == bios && !booted:
				fail("%s did not boot its disk (qemu: %v)", e.vm.Name, e.err)
			}
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !t.Failed() {
		t.Errorf("the cast did not end within %s", deadline)
	}
	if t.Failed() {
		return
	}

	for i, vm := range vms {
		got, err := digest(vm.Disk, imageSize)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s (%s): disk sha256 %s over the image's %d bytes, want %s", vm.Name, vm.MAC, got, imageSize, want)
			continue
		}
		t.Logf("%s (%s, %s): verified, sha256 %s", vm.Name, kinds[i], vm.MAC, got)
		// The kernel prints its command line on the console.
		console, _ := os.ReadFile(vm.Log.path)
		if !strings.Contains(string(console), "dolly.serverkey="+serverKey) || strings.Contains(string(console), string(key)) {
			t.Errorf("%s: the console shows no server key on the kernel command line, or the cast key", vm.Name)
		}
		t.Logf("  %s timeline: %s", vm.Name, timeline(vm.Log))
	}
	// A UEFI machine came through the firmware's own PXE: the server
	// offered it the EFI build of iPXE, or Shim under Secure Boot, and it
	// fetched that (and Shim fetched GRUB and its configuration) over
	// TFTP.
	for i, vm := range vms {
		offer, fetches := "", []string{}
		switch kinds[i] {
		case uefi:
			offer = filepath.Base(boot.DefaultEFIFile)
			fetches = []string{offer}
		case secureBoot:
			offer = "shimx64.efi"
			fetches = []string{offer, "grubx64.efi", "grub/grub.cfg"}
			// Debian's kernel says so when the firmware enforces it.
			if console, _ := os.ReadFile(vm.Log.path); !strings.Contains(string(console), "Secure boot enabled") {
				t.Errorf("%s: the kernel does not report Secure Boot enabled", vm.Name)
			}
		default:
			continue
		}
		offered, _ := srvLog.Lines("mac=" + vm.MAC + " ")
		if len(offered) == 0 || !strings.Contains(offered[0], "file="+offer) {
			t.Errorf("%s (%s): the server's log shows no DHCP offer of %s to it:\n%s", vm.Name, kinds[i], offer, srvLog.Tail(60))
		}
		for _, f := range fetches {
			if fetched, _ := srvLog.Lines("msg=tftp file=" + f); len(fetched) == 0 {
				fetched, _ = srvLog.Lines("msg=tftp file=/" + f)
				if len(fetched) == 0 {
					t.Errorf("%s (%s): the server's log shows no TFTP transfer of %s:\n%s", vm.Name, kinds[i], f, srvLog.Tail(60))
				}
			}
		}
	}
	if summary, err := srvLog.Lines("summary:"); err == nil {
		t.Logf("dolly-server:\n%s", strings.Join(summary, "\n"))
	}
	t.Logf("total %s", time.Since(start).Round(time.Second))
}

// startServer starts dolly-server in n with args, its output in log, and
// returns once it serves: iPXE gives up after a few DHCP tries, so the
// machines start only then. The channel gets the server's exit.
// startServer starts dolly-server in the lab's namespace and waits until
// its log says ready (which log must watch for).
func startServer(ctx context.Context, t *testing.T, n *Net, server string, log *Log, ready string, args ...string) <-chan error {
	t.Helper()
	srv := n.Command(ctx, server, args...)
	srv.Stdout, srv.Stderr = log, log
	if err := srv.Start(); err != nil {
		t.Fatalf("starting dolly-server: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		err := srv.Wait()
		log.Close()
		done <- err
	}()
	select {
	case <-log.Seen(ready):
	case err := <-done:
		t.Fatalf("dolly-server exited before serving: %v", err)
	case <-ctx.Done():
		t.Fatalf("dolly-server did not start serving: %v", ctx.Err())
	}
	return done
}

// netbootFiles returns the kernel the machines boot, and dolly-server and
// the initramfs that make netboot-test builds, or skips the test.
func netbootFiles(t *testing.T) (kernel, server, initramfs string) {
	t.Helper()
	kernel, err := boot.DefaultKernel()
	if err != nil {
		t.Skipf("skipped: %v", err)
	}
	bin := os.Getenv("DOLLY_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin")
	}
	server, initramfs = filepath.Join(bin, "dolly-server"), filepath.Join(bin, "initramfs.cpio.gz")
	requireFile(t, server, "run make netboot-test, which builds it")
	requireFile(t, initramfs, "run make netboot-test, which builds it")
	return kernel, server, initramfs
}

func requireFile(t *testing.T, path, fix string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("skipped: %v: %s", err, fix)
	}
}

// addr returns the address with the given last byte in Subnet.
func addr(last byte) string {
	a := Subnet.Addr().As4()
	a[3] = last
	return netip.AddrFrom4(a).String()
}

// blankDisk creates a sparse file of size bytes: a new, empty disk.
func blankDisk(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// bootSector is a BIOS boot sector that prints diskText on the first
// serial port and halts: x86 real mode, loaded at 0x7c00.
var bootSector = func() []byte {
	code := []byte{
		0xfa,       // cli
		0x31, 0xc0, // xor ax, ax
		0x8e, 0xd8, // mov ds, ax
		0xbe, 0x16, 0x7c, // mov si, 0x7c16 (the text, below)
		0xac,       // next: lodsb
		0x84, 0xc0, // test al, al
		0x74, 0x06, // jz halt
		0xba, 0xf8, 0x03, // mov dx, 0x3f8 (COM1)
		0xee,       // out dx, al
		0xeb, 0xf5, // jmp next
		0xf4,       // halt: hlt
		0xeb, 0xfd, // jmp halt
	}
	b := make([]byte, 512)
	n := copy(b, code)
	copy(b[n:], "\r\n"+diskText+"\r\n\x00")
	b[510], b[511] = 0x55, 0xaa
	return b
}()

// writeBootSector puts bootSector in the image's first sector, which ext4
// leaves to a boot loader.
func writeBootSector(img string) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(bootSector, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyFile copies the file from to a new file to.
func copyFile(to, from string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// digest returns the hex sha256 of the first n bytes of the file.
func digest(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, n); err != nil {
		return "", fmt.Errorf("reading %d bytes of %s: %w", n, path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// timeline lists when each milestone showed on the console, in seconds
// since the machine started.
func timeline(l *Log) string {
	var parts []string
	for _, m := range milestones {
		if at, ok := l.At(m.text); ok {
			parts = append(parts, fmt.Sprintf("%s %.1fs", m.name, at.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// fetch gets path from the server's HTTP port inside the lab's
// namespace, as a machine on its network would: in a process started
// there (this test binary, as TestFetchHelper), so that no thread of this
// one is left in the namespace when it is removed.
func fetch(ctx context.Context, n *Net, path string) (string, error) {
	cmd := n.Command(ctx, os.Args[0], "-test.run=^TestFetchHelper$")
	cmd.Env = append(os.Environ(), "DOLLY_FETCH="+"http://"+net.JoinHostPort(n.Server.String(), strconv.Itoa(boot.DefaultHTTPPort))+path)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	body, ok := strings.CutPrefix(string(out), "BODY\n")
	if !ok {
		return "", fmt.Errorf("%s: %q", path, out)
	}
	body, _, _ = strings.Cut(body, "\nEND\n")
	return body, nil
}

// TestFetchHelper is fetch's process: it prints the body of the URL in
// DOLLY_FETCH between BODY and END lines.
func TestFetchHelper(t *testing.T) {
	url := os.Getenv("DOLLY_FETCH")
	if url == "" {
		t.Skip("skipped: a helper process of TestNetbootCast")
	}
	// Straight to the lab's server: no proxy the environment names.
	c := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	r, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, r.Status)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("BODY\n%s\nEND\n", b)
}
