package boot

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// writeFile writes n pseudo-random bytes to a new file in dir.
func writeFile(t testing.TB, dir, name string, n int) string {
	t.Helper()
	b := make([]byte, n)
	x := uint32(len(name))
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestScript(t *testing.T) {
	got := Script("http://198.18.0.1:9701", []string{"dolly.server=198.18.0.1:9700", "console=tty0", "dolly.key=abc"})
	want := "#!ipxe\n" +
		"kernel http://198.18.0.1:9701/vmlinuz initrd=initramfs dolly.server=198.18.0.1:9700 console=tty0 dolly.key=abc\n" +
		"initrd http://198.18.0.1:9701/initramfs\n" +
		"boot\n"
	if got != want {
		t.Errorf("Script:\n%s\nwant:\n%s", got, want)
	}
}

func TestHTTP(t *testing.T) {
	dir := t.TempDir()
	kernel := writeFile(t, dir, "vmlinuz-6.1.0-56-amd64", 300_001)
	initramfs := writeFile(t, dir, "initramfs.cpio.gz", 123_457)
	script := Script("http://198.18.0.1:9701", []string{"dolly.server=198.18.0.1:9700"})
	var log bytes.Buffer
	srv := httptest.NewServer(httpHandler("http://198.18.0.1:9701", map[string]archBoot{"": {script, kernel, initramfs}}, nil, nil, nil, slog.New(slog.NewTextHandler(&log, nil))))
	defer srv.Close()

	fileBytes := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/boot.ipxe", 200, script},
		{"GET", "/vmlinuz", 200, fileBytes(kernel)},
		{"GET", "/initramfs", 200, fileBytes(initramfs)},
		{"HEAD", "/vmlinuz", 200, ""},
		{"GET", "/", 404, ""},
		{"GET", "/../etc/passwd", 404, ""},
		{"GET", "/vmlinuz/x", 404, ""},
		{"POST", "/vmlinuz", 405, ""},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
			continue
		}
		if tt.status == 200 && string(body) != tt.body {
			t.Errorf("%s %s: %d bytes differ from the %d expected", tt.method, tt.path, len(body), len(tt.body))
		}
	}
	for _, want := range []string{"path=/boot.ipxe", "path=/initramfs", "status=200 bytes=123457", "status=404"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// Paths that are not boot files go to the other handler (the status
// page); the boot files do not.
func TestHTTPServesOtherPaths(t *testing.T) {
	dir := t.TempDir()
	kernel := writeFile(t, dir, "vmlinuz", 1001)
	initramfs := writeFile(t, dir, "initramfs.cpio.gz", 1002)
	script := Script("http://198.18.0.1:9701", nil)
	other := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "page %s", r.URL.Path) })
	srv := httptest.NewServer(httpHandler("http://198.18.0.1:9701", map[string]archBoot{"": {script, kernel, initramfs}}, nil, nil, other, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	tests := []struct{ path, want string }{
		{"/", "page /"},
		{"/metrics", "page /metrics"},
		{"/boot.ipxe", script},
		{"/vmlinuz", ""}, // the kernel: checked by its size below
	}
	for _, tt := range tests {
		resp, err := http.Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode != 200:
			t.Errorf("GET %s: status %d", tt.path, resp.StatusCode)
		case tt.path == "/vmlinuz" && len(body) != 1001:
			t.Errorf("GET /vmlinuz: %d bytes, want the kernel's 1001", len(body))
		case tt.path != "/vmlinuz" && string(body) != tt.want:
			t.Errorf("GET %s: %q, want %q", tt.path, body, tt.want)
		}
	}
}

// A PC that names its MAC gets the node's script, or its own disk's when
// the server says why it should boot that.
func TestHTTPBootsTheLocalDisk(t *testing.T) {
	dir := t.TempDir()
	kernel := writeFile(t, dir, "vmlinuz", 1000)
	initramfs := writeFile(t, dir, "initramfs.cpio.gz", 1000)
	script := Script("http://198.18.0.1:9701", []string{"dolly.server=198.18.0.1:9700"})
	local := func(mac string) string {
		if mac == "52:54:00:12:34:01" {
			return "pc01 is verified in this cast"
		}
		return ""
	}
	var log bytes.Buffer
	var mu sync.Mutex
	var sent []string
	sentTo := func(mac string) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, mac)
	}
	srv := httptest.NewServer(httpHandler("http://198.18.0.1:9701", map[string]archBoot{"": {script, kernel, initramfs}}, local, sentTo, nil, slog.New(slog.NewTextHandler(&log, nil))))
	defer srv.Close()
	tests := []struct {
		path string
		want string
	}{
		{"/boot.ipxe", "#!ipxe\nchain http://198.18.0.1:9701/boot.ipxe?mac=${netX/mac:hexhyp}\n"},
		{"/boot.ipxe?mac=52-54-00-12-34-01", LocalScript("pc01 is verified in this cast")},
		{"/boot.ipxe?mac=52:54:00:12:34:02", script},
		{"/boot.ipxe?mac=52:54:00:12:34:01", LocalScript("pc01 is verified in this cast")},
		{"/boot.ipxe?mac=52:54:00:12:34:AB", script},
		{"/boot.ipxe?mac=", script},
	}
	for _, tt := range tests {
		resp, err := http.Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != tt.want {
			t.Errorf("GET %s: %d %q (%v), want %q", tt.path, resp.StatusCode, body, err, tt.want)
		}
	}
	// Told once per script delivered, never for the node's.
	mu.Lock()
	if want := []string{"52:54:00:12:34:01", "52:54:00:12:34:01"}; !slices.Equal(sent, want) {
		t.Errorf("told of PCs sent to their disks: %q, want %q", sent, want)
	}
	mu.Unlock()
	if !strings.Contains(log.String(), "the PC boots its local disk") {
		t.Errorf("no log line for the PC sent to its disk:\n%s", log.String())
	}
	for _, want := range []string{"echo dolly: pc01 is verified in this cast: booting the local disk\n", "iseq ${platform} efi && exit", "sanboot --no-describe --drive 0x80"} {
		if !strings.Contains(LocalScript("pc01 is verified in this cast"), want) {
			t.Errorf("LocalScript lacks %q", want)
		}
	}
	if got := LocalScript("a ${x}\nshell && reboot"); strings.Contains(got, "${x}") || strings.Contains(got, "&& reboot") || strings.Count(got, "\n") != 4 {
		t.Errorf("LocalScript lets the reason expand or add lines: %q", got)
	}
}

// Told that the last PC has its script, dolly-server stops serving at
// once: the script must have reached the PC whole by then, as it has when
// the connection is cut the moment the handler says so.
func TestHTTPLocalScriptIsWholeWhenSent(t *testing.T) {
	dir := t.TempDir()
	kernel := writeFile(t, dir, "vmlinuz", 1000)
	initramfs := writeFile(t, dir, "initramfs.cpio.gz", 1000)
	local := func(string) string { return "pc01 is verified in this cast" }
	var srv *httptest.Server
	cut := func(string) { srv.CloseClientConnections() }
	srv = httptest.NewServer(httpHandler("http://198.18.0.1:9701", map[string]archBoot{"": {"#!ipxe\n", kernel, initramfs}}, local, cut, nil, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/boot.ipxe?mac=52-54-00-12-34-01")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := LocalScript("pc01 is verified in this cast"); err != nil || string(body) != want {
		t.Errorf("the script as the server stopped: %q (%v), want %q", body, err, want)
	}
}

// ARM64 PCs get their own script, kernel and initramfs, under /arm64, with
// their console; the MAC round trip keeps the architecture. An
// architecture the server has nothing for is not found.
func TestHTTPServesARM64(t *testing.T) {
	dir := t.TempDir()
	kernel := writeFile(t, dir, "vmlinuz-amd64", 1000)
	initramfs := writeFile(t, dir, "initramfs.cpio.gz", 1001)
	kernelARM := writeFile(t, dir, "vmlinuz-arm64", 2000)
	initramfsARM := writeFile(t, dir, "initramfs-arm64.cpio.gz", 2001)
	const base = "http://198.18.0.1:9701"
	boots := map[string]archBoot{
		"":      {Script(base, []string{"console=ttyS0"}), kernel, initramfs},
		"arm64": {Script(base+"/arm64", []string{"console=ttyAMA0"}), kernelARM, initramfsARM},
	}
	local := func(mac string) string { return "" }
	srv := httptest.NewServer(httpHandler(base, boots, local, nil, nil, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if _, got := get("/boot.ipxe?arch=arm64"); got != "#!ipxe\nchain "+base+"/boot.ipxe?arch=arm64&mac=${netX/mac:hexhyp}\n" {
		t.Errorf("ARM64 PC asked for its MAC with %q", got)
	}
	_, script := get("/boot.ipxe?arch=arm64&mac=52-54-00-12-34-01")
	for _, want := range []string{"kernel " + base + "/arm64/vmlinuz ", "console=ttyAMA0", "initrd " + base + "/arm64/initramfs\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("ARM64 script lacks %q:\n%s", want, script)
		}
	}
	if _, x86 := get("/boot.ipxe?mac=52-54-00-12-34-02"); !strings.Contains(x86, base+"/vmlinuz ") || strings.Contains(x86, "arm64") {
		t.Errorf("x86-64 script:\n%s", x86)
	}
	for path, size := range map[string]int{"/arm64/vmlinuz": 2000, "/arm64/initramfs": 2001, "/vmlinuz": 1000, "/initramfs": 1001} {
		if code, body := get(path); code != 200 || len(body) != size {
			t.Errorf("GET %s: %d, %d bytes; want 200 and %d", path, code, len(body), size)
		}
	}
	if code, _ := get("/boot.ipxe?arch=riscv64"); code != 404 {
		t.Errorf("an architecture with no boot files: status %d, want 404", code)
	}
}
