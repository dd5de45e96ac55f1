package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"dolly/server"
)

// defaultHTTP is where the status page listens without -boot: the port
// netboot serves its files on, so that the page is at one address either
// way.
const defaultHTTP = ":9701"

// serveStatus serves h on addr, and returns the page's URL and what stops
// it: stop waits (a little) for the requests under way, so that the event
// streams, which end once the hub is closed, get their last state out
// before the program exits. A page that cannot listen on the default
// address is not worth failing a cast for: it says so and returns "".
func serveStatus(addr string, explicit bool, h http.Handler, log *slog.Logger) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if explicit {
			return "", nil, fmt.Errorf("status page: %w (pass -http ADDR, or -http off)", err)
		}
		fmt.Fprintf(os.Stderr, "dolly-server: warning: no status page: %v (pass -http ADDR)\n", err)
		return "", func() {}, nil
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go srv.Serve(ln)
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
	}
	return pageURL(ln.Addr().(*net.TCPAddr)), stop, nil
}

// pageURL is how a browser elsewhere reaches a listener on a: by the
// machine's name when it listens on every address.
func pageURL(a *net.TCPAddr) string {
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host, _ = os.Hostname()
	}
	return fmt.Sprintf("http://%s/", net.JoinHostPort(host, fmt.Sprint(a.Port)))
}

// jsonEvents writes each event as a line of JSON. Send never blocks the
// cast: events queue while the reader is slow, and Close writes what is
// left.
type jsonEvents struct {
	mu     sync.Mutex
	queue  []server.Event
	more   *sync.Cond
	closed bool
	done   chan struct{}
	err    error
}

func newJSONEvents(w io.Writer) *jsonEvents {
	j := &jsonEvents{done: make(chan struct{})}
	j.more = sync.NewCond(&j.mu)
	go j.write(json.NewEncoder(w))
	return j
}

// Send queues e.
func (j *jsonEvents) Send(e server.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		j.queue = append(j.queue, e)
		j.more.Signal()
	}
}

func (j *jsonEvents) write(enc *json.Encoder) {
	defer close(j.done)
	for {
		j.mu.Lock()
		for len(j.queue) == 0 && !j.closed {
			j.more.Wait()
		}
		batch := j.queue
		j.queue = nil
		closed := j.closed
		j.mu.Unlock()
		for _, e := range batch {
			if err := enc.Encode(e); err != nil && j.err == nil {
				j.err = fmt.Errorf("writing events: %w", err)
			}
		}
		if closed && len(batch) == 0 {
			return
		}
	}
}

// Close writes what is queued and stops.
func (j *jsonEvents) Close() error {
	j.mu.Lock()
	j.closed = true
	j.more.Signal()
	j.mu.Unlock()
	<-j.done
	return j.err
}

// fanOut is one Config.Events that tells each of fs.
func fanOut(fs ...func(server.Event)) func(server.Event) {
	return func(e server.Event) {
		for _, f := range fs {
			f(e)
		}
	}
}
