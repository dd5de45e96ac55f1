package status

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed static
var static embed.FS

// Handler serves the status page (/), its files (/static/), the state as
// JSON (/state), the same as server-sent events whenever it changes
// (/events) and Prometheus metrics (/metrics). It only reads: nothing it
// serves changes the cast.
func (h *Hub) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(h))
	files, _ := fs.Sub(static, "static")
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /state", h.serveState)
	mux.HandleFunc("GET /events", h.serveEvents)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

func (h *Hub) serveState(w http.ResponseWriter, r *http.Request) {
	b, _, err := h.encoded()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// Server-sent events: at most one state every eventGap, and a comment
// every keepAlive so that proxies and the browser keep the stream open.
const (
	eventGap  = 250 * time.Millisecond
	keepAlive = 15 * time.Second
)

// serveEvents sends the state at once and again whenever it changes, until
// the client goes or the hub closes.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// A stream lasts as long as the page is open: no server write
	// timeout (netboot's HTTP server has one, for slow firmware) cuts it.
	rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	changed, stop := h.watch()
	defer stop()
	var sent uint64
	send := func() error {
		b, v, err := h.encoded()
		if err != nil || v == sent && sent != 0 {
			return err
		}
		sent = v
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send() != nil {
		return
	}
	alive := time.NewTicker(keepAlive)
	defer alive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.closing:
			send()
			return
		case <-changed:
			if send() != nil {
				return
			}
			// Events that come meanwhile fold into the next state.
			select {
			case <-time.After(eventGap):
			case <-h.closing:
			case <-r.Context().Done():
				return
			}
		case <-alive.C:
			if _, err := fmt.Fprint(w, ": alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
