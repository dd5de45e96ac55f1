package status

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"dolly/dolly/node"
	"dolly/internal/testimage"
	"dolly/server"
)

// A real cast over loopback, watched through the hub's HTTP handler: the
// metrics move while it runs and end where the summary does, and the
// event stream carries the same state.
func TestMetricsAndEventsFollowACast(t *testing.T) {
	const size = 24 << 20
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	if err := testimage.Write(img, size, 5, testimage.Mix{Random: 0.5}); err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	page := httptest.NewServer(hub.Handler())
	defer func() {
		page.CloseClientConnections() // the event stream does not end by itself
		page.Close()
	}()

	// The event stream, read from before the cast.
	states := make(chan State, 64)
	go readEvents(t, page.URL+"/events", states)
	if st := <-states; st.Phase != Waiting {
		t.Fatalf("first state's phase %q, want waiting", st.Phase)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addrc := make(chan string, 1)
	var sum server.Summary
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		sum, runErr = server.Run(ctx, server.Config{Image: img, Nodes: 2, Listen: "127.0.0.1:0", NoProbe: true, Yes: true,
			Shape: "chain", MaxRate: 6e6, Out: io.Discard, Events: hub.Publish,
			Ready: func(a net.Addr) { addrc <- a.String() }})
	}()
	addr := <-addrc
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := node.Run(ctx, node.Config{Server: addr, Target: filepath.Join(dir, fmt.Sprintf("pc%02d", i+1)),
				Name: fmt.Sprintf("pc%02d", i+1), DataListen: "127.0.0.1:0", NoProbe: true}); err != nil {
				t.Errorf("pc%02d: %v", i+1, err)
			}
		}()
	}

	// Mid-cast, pc02's written bytes grow from one scrape to a later one.
	first := -1.0
	for deadline := time.Now().Add(30 * time.Second); ; {
		v, ok := metric(scrape(t, page.URL), `dolly_node_written_bytes{node="pc02"}`)
		if ok && v > 0 && v < size {
			if first < 0 {
				first = v
			} else if v > first {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Log(scrape(t, page.URL))
			t.Fatalf("pc02's written bytes never grew mid-cast (first %v, last %v)", first, v)
		}
		time.Sleep(100 * time.Millisecond) // a scrape interval, not a wait for an event
	}
	wg.Wait()
	<-done
	if runErr != nil {
		t.Fatal(runErr)
	}

	body := scrape(t, page.URL)
	want := map[string]float64{
		`dolly_image_bytes`:                              float64(sum.Size),
		`dolly_node_written_bytes{node="pc01"}`:          float64(sum.Size),
		`dolly_node_written_bytes{node="pc02"}`:          float64(sum.Size),
		`dolly_node_state{node="pc01",state="verified"}`: 1,
		`dolly_node_state{node="pc02",state="verified"}`: 1,
		`dolly_nodes{state="verified"}`:                  float64(sum.Verified),
		`dolly_casts_total{result="verified"}`:           1,
		`dolly_casts_total{result="failed"}`:             0,
		`dolly_node_failures_total`:                      0,
		`dolly_cast_over`:                                1,
		`dolly_cast_duration_seconds`:                    sum.Elapsed.Seconds(),
		`dolly_source_sent_bytes`:                        float64(sum.StreamBytes),
		`dolly_node_state{node="pc02",state="failed"}`:   0,
	}
	for name, w := range want {
		got, ok := metric(body, name)
		if !ok || got != w {
			t.Errorf("%s = %v (found %v), want %v", name, got, ok, w)
		}
	}

	// The stream's last state is the summary's.
	var last State
	for deadline := time.After(10 * time.Second); last.Phase != Over; {
		select {
		case last = <-states:
		case <-deadline:
			t.Fatalf("the event stream never said the cast was over (last phase %q)", last.Phase)
		}
	}
	if last.Summary == nil || last.Summary.Verified != 2 || len(last.Nodes) != 2 || !last.Nodes[0].Verified || last.Nodes[1].Written != size {
		t.Errorf("last state: summary %+v, nodes %+v", last.Summary, last.Nodes)
	}
}

// readEvents sends every state /events carries to states until the
// stream ends.
func readEvents(t *testing.T, url string, states chan<- State) {
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("/events: content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var st State
		if err := json.Unmarshal([]byte(data), &st); err != nil {
			t.Errorf("/events: %v in %q", err, data)
			return
		}
		select {
		case states <- st:
		default: // the test reads only some
		}
	}
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metric finds the sample named name (with its labels, as Prometheus'
// text format writes them) in body.
func metric(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// The event stream outlives a server's write timeout (netboot's HTTP
// server has one).
func TestEventsOutliveWriteTimeout(t *testing.T) {
	hub := NewHub()
	srv := httptest.NewUnstartedServer(hub.Handler())
	srv.Config.WriteTimeout = 300 * time.Millisecond
	srv.Start()
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()
	states := make(chan State, 64)
	go readEvents(t, srv.URL+"/events", states)
	<-states
	time.Sleep(600 * time.Millisecond) // past the write timeout
	hub.Publish(server.Event{Type: server.EvJoined, Node: "pc01", Text: "joined pc01"})
	select {
	case st := <-states:
		if len(st.Joined) != 1 {
			t.Errorf("state after the join: %+v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was cut by the write timeout")
	}
}
