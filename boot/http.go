package boot

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Script returns the iPXE script that boots the kernel and initramfs
// served under base (http://IP:PORT) with the kernel command line args.
// "initrd=initramfs" names the initrd image for kernels booted through
// their EFI stub.
func Script(base string, args []string) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "kernel %s/vmlinuz initrd=initramfs", base)
	for _, a := range args {
		b.WriteString(" " + a)
	}
	fmt.Fprintf(&b, "\ninitrd %s/initramfs\nboot\n", base)
	return b.String()
}

// LocalScript returns the iPXE script that has a PC boot its own disk,
// saying why: a UEFI PC leaves iPXE for the firmware's next boot option,
// a BIOS PC boots its first hard disk.
func LocalScript(why string) string {
	return "#!ipxe\n" +
		"echo dolly: " + strings.Map(plainRune, why) + ": booting the local disk\n" +
		"iseq ${platform} efi && exit 1 ||\n" +
		"sanboot --no-describe --drive 0x80 || exit 1\n"
}

// plainRune keeps what iPXE's echo prints as it is: letters, digits and
// some punctuation; no settings ($), operators (&&, ||) or line breaks.
func plainRune(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune(" .,:-_()/", r):
		return r
	}
	return ' '
}

// askMAC returns the script that has iPXE fetch the boot script again
// from base, naming the MAC address of the NIC it booted from: iPXE
// expands it only in a script, not in the file name DHCP gives it. The
// URL is absolute and the MAC hyphenated, which every iPXE parses. arch,
// if set, is the architecture the script is for, kept in the URL.
func askMAC(base, arch string) string {
	query := "?"
	if arch != "" {
		query = "?arch=" + arch + "&"
	}
	return "#!ipxe\nchain " + base + "/boot.ipxe" + query + "mac=${netX/mac:hexhyp}\n"
}

// archBoot is what the PCs of one architecture boot over HTTP: the iPXE
// script, and the paths of the kernel and the initramfs it names.
type archBoot struct {
	script, kernel, initramfs string
}

// httpHandler serves the iPXE script, the kernel and the initramfs of each
// architecture in boots: x86-64's ("") at base, /boot.ipxe, /vmlinuz and
// /initramfs; another's at /boot.ipxe?arch=A, /A/vmlinuz and /A/initramfs.
// Every other path goes to other (nothing if nil). With local, a PC that
// names its MAC (see askMAC) for which local gives a reason gets
// LocalScript instead, and sent, if set, is told once the script is on its
// way.
func httpHandler(base string, boots map[string]archBoot, local func(mac string) string, sent func(mac string), other http.Handler, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", func(w http.ResponseWriter, r *http.Request) {
		arch := r.URL.Query().Get("arch")
		b, ok := boots[arch]
		if !ok {
			http.Error(w, "no boot files for architecture "+arch, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		mac, named := r.URL.Query()["mac"]
		switch {
		case local == nil:
			fmt.Fprint(w, b.script)
		case !named:
			fmt.Fprint(w, askMAC(base, arch))
		default:
			addr := strings.ToLower(strings.ReplaceAll(mac[0], "-", ":"))
			if why := local(addr); why != "" {
				log.Info("http: the PC boots its local disk", "mac", mac[0], "why", why)
				// Whole once flushed: told of the last PC, dolly-server
				// stops serving, and a chunked body's end, written only
				// when the handler returns, could be cut off (iPXE then
				// reports the connection reset and boots nothing).
				script := LocalScript(why)
				w.Header().Set("Content-Length", strconv.Itoa(len(script)))
				fmt.Fprint(w, script)
				if err := http.NewResponseController(w).Flush(); err == nil && sent != nil {
					sent(addr)
				}
				return
			}
			fmt.Fprint(w, b.script)
		}
	})
	paths := []string{"/boot.ipxe"}
	for arch, b := range boots {
		dir := ""
		if arch != "" {
			dir = "/" + arch
		}
		mux.HandleFunc("GET "+dir+"/vmlinuz", serveFile(b.kernel))
		mux.HandleFunc("GET "+dir+"/initramfs", serveFile(b.initramfs))
		paths = append(paths, dir+"/vmlinuz", dir+"/initramfs")
	}
	boot := logRequests(mux, log)
	if other == nil {
		return boot
	}
	// The boot files are logged; the rest (a page that polls) is not.
	top := http.NewServeMux()
	for _, path := range paths {
		top.Handle(path, boot)
	}
	top.Handle("/", other)
	return top
}

// serveFile serves path, opened afresh per request so that a rebuilt
// initramfs is picked up without a restart. ServeContent answers HEAD and
// range requests, which iPXE may use.
func serveFile(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, "cannot open the file", http.StatusInternalServerError)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			http.Error(w, "cannot open the file", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", fi.ModTime(), f)
	}
}

// logRequests logs every request once it is answered.
func logRequests(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		log.Info("http", "method", r.Method, "path", r.URL.Path, "client", r.RemoteAddr,
			"status", rec.status, "bytes", rec.n, "duration", time.Since(start).Round(time.Millisecond))
	})
}

// recorder notes the status and size of a response for the log.
type recorder struct {
	http.ResponseWriter
	status int
	n      int64
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
