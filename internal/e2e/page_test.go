package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"dolly/internal/browser"
	"dolly/internal/testimage"
	"dolly/server"
)

// The status page, in a real browser, during a cast: it shows every node
// and their progress moving, draws the plan, and turns a killed node
// FAILED.
func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser.Headless(t, 90*time.Second)
	page := freePort(t)
	c := newFailCast(t, 3, "-http", page, "-node-timeout", "2s")
	c.startServer()
	waitLine(t, c.server, "status page")
	// The page is open before any node joins: a cast of a few seconds must
	// not end while the browser is still starting.
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+page+"/")); err != nil {
		t.Fatalf("the status page did not load: %v\n%s", err, c.server.out.String())
	}
	c.startNodes()

	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#picture svg g[data-node="pc03"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="pc01"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="pc02"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="pc03"]`)),
	); err != nil {
		t.Fatalf("the page never showed the plan and its three nodes: %v\n%s", err, c.server.out.String())
	}
	// Progress moves on the page while the cast runs.
	const bytesOf = `Number(document.querySelector('tr[data-node="pc01"] td.written').dataset.bytes)`
	first, err := chromedp.Run(ctx, chromedp.Evaluate[int64](bytesOf))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf("%s > %d", bytesOf, first))); err != nil {
		t.Fatalf("pc01's progress on the page stayed at %d: %v", first, err)
	}
	waitWritten(t, c.nodes[1], failImage/4)
	c.nodes[1].cmd.Process.Signal(syscall.SIGKILL)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelector('tr[data-node="pc02"] .state').textContent === "FAILED"`)); err != nil {
		t.Fatalf("the killed pc02 never turned FAILED on the page: %v\n%s", err, c.server.out.String())
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: a PNG
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("DOLLY_SCREENSHOTS") // where to keep it; make bench-quick sets it
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, "status-page-loopback.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	// The others finish; the page says so.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelector('tr[data-node="pc03"] .state').textContent === "VERIFIED"`)); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("pc03 never turned VERIFIED on the page: %v\npage:\n%s\nserver:\n%s", err, text, c.server.out.String())
	}
	if msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("error").textContent`)); err != nil || msg != "" {
		t.Errorf("the page reports an error: %q (%v)", msg, err)
	}
	if code := c.server.wait(t, time.Minute); code != 1 {
		t.Errorf("dolly-server exited %d with a node killed, want 1:\n%s", code, c.server.out.String())
	}
	for _, i := range []int{0, 2} {
		c.nodes[i].wait(t, time.Minute)
		c.checkTarget(i)
	}
}

// -o json: every line of stdout is an event, in order, and the last, the
// summary, says what the terminal's summary says.
func TestJSONEvents(t *testing.T) {
	c := newFailCast(t, 2, "-o", "json", "-http", "off")
	c.startServer()
	c.startNodes()
	if code := c.server.wait(t, time.Minute); code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", code, c.server.out.String())
	}
	for i := range c.nodes {
		c.nodes[i].wait(t, time.Minute)
	}
	var events []server.Event
	sc := bufio.NewScanner(strings.NewReader(c.server.stdout.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e server.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("stdout line %q is not an event: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	var types []string
	for _, e := range events {
		if len(types) == 0 || types[len(types)-1] != string(e.Type) {
			types = append(types, string(e.Type))
		}
	}
	want := "listening joined plan started progress verified summary"
	if got := strings.Join(types, " "); !strings.HasPrefix(got, "listening joined plan started") || !strings.HasSuffix(got, "summary") || !strings.Contains(got, "verified") {
		t.Errorf("event types %q, want them in the order %q", got, want)
	}
	sum := events[len(events)-1].Summary
	if sum == nil {
		t.Fatal("the last event has no summary")
	}
	report := c.readReport()
	if sum.Verified != 2 || sum.Verified != report.Verified || sum.Digest != report.Digest || len(sum.Nodes) != len(report.Nodes) {
		t.Errorf("summary event %+v differs from the report %+v", sum, report)
	}
	// The terminal view went to stderr, and says the same.
	term := c.server.stderr.String()
	if !strings.Contains(term, fmt.Sprintf("%d of %d nodes verified", sum.Verified, len(sum.Nodes))) || !strings.Contains(term, sum.Digest[:12]) {
		t.Errorf("the terminal's summary does not match the event's (%d of %d, digest %.12s):\n%s", sum.Verified, len(sum.Nodes), sum.Digest, term)
	}
}

// In service mode the page queues a cast: a wrong token is refused with
// the reason, the right one queues it, and the queue shows it run and end.
func TestServePageQueuesACast(t *testing.T) {
	ctx := browser.Headless(t, 90*time.Second)
	lib, disks := t.TempDir(), t.TempDir()
	const size = 4 << 20
	img := filepath.Join(lib, "nt.img")
	if err := testimage.Write(img, size, 50, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	groups := filepath.Join(disks, "groups")
	os.WriteFile(groups, []byte("lab1: pc01\n"), 0o644)
	page, listen := freePort(t), freePort(t)
	srv := start(t, "dolly-server", "-serve", "-images", lib, "-groups", groups, "-http", page, "-listen", listen, "-no-probe", "-net-probe", "0")
	waitLine(t, srv, "serving the images")
	token, err := os.ReadFile(filepath.Join(lib, ".dolly-admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	form := `#queue-form`
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+page+"/"),
		chromedp.WaitReady(chromedp.CSS(form+` select[name=image] option[value="nt.img"]`)),
		chromedp.WaitVisible(chromedp.CSS(form+` input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(form+` input[name=token]`), "not-the-token"),
		chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
	); err != nil {
		t.Fatalf("the service page shows no queue form: %v\n%s", err, srv.out.String())
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("queue-result").textContent.includes("admin token")`)); err != nil {
		t.Fatalf("a wrong token was not refused on the page: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(form+` input[name=token]`), strings.TrimSpace(string(token))),
		chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!document.querySelector('tr[data-cast="1"]')`)); err != nil {
		t.Fatalf("the cast queued from the page is not in its queue: %v\n%s", err, srv.out.String())
	}
	node := start(t, "dolly", "-server", listen, "-target", filepath.Join(disks, "pc01"), "-name", "pc01", "-listen-data", "127.0.0.1:0", "-no-probe", "-join-timeout", "30s")
	if code := node.wait(t, time.Minute); code != 0 {
		t.Fatalf("pc01 exited %d:\n%s", code, node.out.String())
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('tr[data-cast="1"] .cast-state').textContent === "verified"`)); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the queue never showed cast 1 verified: %v\n%s", err, text)
	}
	want, _ := testimage.SHA256(img, -1)
	if got, _ := testimage.SHA256(filepath.Join(disks, "pc01"), size); got != want {
		t.Errorf("pc01 holds %.12s, want %.12s", got, want)
	}
	if msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("error").textContent`)); msg != "" {
		t.Errorf("the page reports an error: %q", msg)
	}
}

// A cast that cannot start still ends its events with a summary.
func TestJSONEventsOfACastThatCannotStart(t *testing.T) {
	p := start(t, "dolly-server", "-image", "/nonexistent/nt.img", "-nodes", "1", "-listen", freePort(t), "-o", "json", "-http", "off")
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d, want 3:\n%s", code, p.out.String())
	}
	var e server.Event
	if err := json.Unmarshal([]byte(strings.TrimSpace(p.stdout.String())), &e); err != nil {
		t.Fatalf("stdout %q is not one event: %v", p.stdout.String(), err)
	}
	if e.Type != server.EvSummary || e.Summary == nil || e.Summary.Started || !strings.Contains(e.Text, "does not exist") {
		t.Errorf("event %+v, want a summary of a cast that did not start, saying why", e)
	}
}
