package boot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/pin/tftp/v3"
)

// newTFTP returns a read-only TFTP server for files, which maps the names
// clients may ask for to paths. Names are looked up, never joined to a
// directory, so no request can reach another file.
// generated, if set, gives the files made up on request.
func newTFTP(files map[string]string, generated func(name string) (generatedFile, bool), log *slog.Logger) *tftp.Server {
	read := func(name string, rf io.ReaderFrom) error {
		client := rf.(tftp.OutgoingTransfer).RemoteAddr()
		// send sends r, and says how it went.
		send := func(r io.Reader) error {
			// ReadFrom finds the size for the tsize option by seeking r.
			n, err := rf.ReadFrom(r)
			if err != nil {
				level := slog.LevelWarn
				if n == 0 {
					// UEFI firmware asks for the size first and ends that
					// transfer before the data.
					level = slog.LevelInfo
				}
				log.Log(context.Background(), level, "tftp: transfer ended early", "file", name, "client", client.String(), "bytes", n, "err", err)
				return err
			}
			log.Info("tftp", "file", name, "client", client.String(), "bytes", n)
			return nil
		}
		if generated != nil {
			if f, ok := generated(strings.TrimPrefix(name, "/")); ok {
				if err := send(strings.NewReader(f.text)); err != nil {
					return err
				}
				if f.delivered != nil {
					f.delivered()
				}
				return nil
			}
		}
		path, ok := tftpLookup(files, name)
		if !ok {
			log.Info("tftp: unknown file", "file", name, "client", client.String())
			return fmt.Errorf("%q: no such file", name)
		}
		f, err := os.Open(path)
		if err != nil {
			log.Warn("tftp", "file", name, "err", err)
			return fmt.Errorf("%q: cannot open", name)
		}
		defer f.Close()
		return send(f)
	}
	// No write handler: the library refuses write requests.
	s := tftp.NewServer(read, nil)
	// Short, so that Shutdown does not wait long for a vanished client.
	s.SetTimeout(2 * time.Second)
	return s
}

// tftpLookup returns the path served under name. Some firmware asks for
// "/undionly.kpxe", so one leading slash is allowed.
func tftpLookup(files map[string]string, name string) (string, bool) {
	path, ok := files[strings.TrimPrefix(name, "/")]
	return path, ok
}
