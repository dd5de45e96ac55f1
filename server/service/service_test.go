package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"dolly/dolly/node"
	"dolly/imaging"
	"dolly/internal/testimage"
	"dolly/server"
)

func TestReadGroups(t *testing.T) {
	g, err := ReadGroups(strings.NewReader("# the labs\nlab1: pc01 pc02, 52:54:00:AA:00:01\n\nlab2: lab2-*  # by name\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		group, name string
		macs        []string
		want        bool
	}{
		{"lab1", "pc01", nil, true},
		{"lab1", "pc03", nil, false},
		{"lab1", "anything", []string{"52:54:00:aa:00:01"}, true},
		{"lab2", "lab2-07", nil, true},
		{"lab2", "pc01", nil, false},
		{"lab3", "pc01", nil, false},
	}
	for _, tt := range tests {
		if got := g.Admits(tt.group, tt.name, tt.macs); got != tt.want {
			t.Errorf("Admits(%s, %s, %v) = %v, want %v", tt.group, tt.name, tt.macs, got, tt.want)
		}
	}
	if g.Size("lab1") != 3 || g.Size("lab2") != 0 {
		t.Errorf("sizes %d and %d, want 3 and 0 (patterns)", g.Size("lab1"), g.Size("lab2"))
	}
	if !g.Listed("52:54:00:aa:00:01") || g.Listed("52:54:00:aa:00:02") {
		t.Error("Listed does not follow the MACs the groups name")
	}
	for _, bad := range []string{"", "lab1 pc01", "lab1:", "a b: pc01", "lab1: pc01\nlab1: pc02", "lab1: [x"} {
		if _, err := ReadGroups(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadGroups(%q) accepted it", bad)
		}
	}
}

func TestLibrary(t *testing.T) {
	dir := t.TempDir()
	if err := testimage.Write(filepath.Join(dir, "a.img"), 1<<20, 1, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	if err := testimage.Compress(filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img.zst"), imaging.Zstd); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ".hidden"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.xz"), append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, make([]byte, 100)...), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	lib, err := NewLibrary(dir)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := lib.Images()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range imgs {
		got = append(got, i.Name+":"+i.Format)
	}
	if fmt.Sprint(got) != "[a.img:raw b.img.zst:zstd]" {
		t.Errorf("images %v, want a.img (raw) and b.img.zst (zstd) only", got)
	}
	for _, bad := range []string{"../a.img", "sub", ".hidden", "missing.img", "", "notes.xz"} {
		if _, err := lib.Path(bad); err == nil {
			t.Errorf("Path(%q) was accepted", bad)
		}
	}
}

// Two casts queued through the API run one after the other in one
// service, each to the machines of its group, and a machine of no group is
// refused.
func TestServiceRunsQueuedCasts(t *testing.T) {
	dir, disks := t.TempDir(), t.TempDir()
	const size = 4 << 20
	for i, name := range []string{"first.img", "second.img"} {
		if err := testimage.Write(filepath.Join(dir, name), size, uint64(i+1), testimage.Typical); err != nil {
			t.Fatal(err)
		}
	}
	lib, err := NewLibrary(dir)
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := ReadGroups(strings.NewReader("lab1: pc01 pc02\n"))
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	listen := ln.Addr().String()
	ln.Close()
	svc, err := New(Config{Library: lib, Groups: groups,
		Base: server.Config{Listen: listen, NoProbe: true, Out: io.Discard, JoinTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	api := httptest.NewServer(svc.Handler("sesame"))
	defer api.Close()

	post := func(token, body string) (int, string) {
		req, _ := http.NewRequest("POST", api.URL+"/api/casts", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("", `{"image": "first.img", "group": "lab1"}`); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s, want 401", code, body)
	}
	if code, body := post("wrong", `{"image": "first.img", "group": "lab1"}`); code != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d %s, want 401", code, body)
	}
	for _, bad := range []string{`{"image": "../first.img", "group": "lab1"}`, `{"image": "first.img", "group": "lab9"}`, `{"image": "first.img"}`, `{"image": "first.img", "group": "lab1", "plan": "ring"}`, `{"img": "x"}`} {
		if code, body := post("sesame", bad); code != http.StatusBadRequest || !strings.Contains(body, "error") {
			t.Errorf("%s: %d %s, want 400 with the reason", bad, code, body)
		}
	}

	for round, image := range []string{"first.img", "second.img"} {
		if code, body := post("sesame", fmt.Sprintf(`{"image": %q, "group": "lab1", "plan": "chain"}`, image)); code != http.StatusCreated {
			t.Fatalf("queueing %s: %d %s", image, code, body)
		}
		// A machine of no group is turned away.
		_, err := node.Run(ctx, node.Config{Server: listen, Target: filepath.Join(disks, "stranger"), Name: "pc09",
			DataListen: "127.0.0.1:0", NoProbe: true, JoinTimeout: 30 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "not in group lab1") {
			t.Errorf("round %d: pc09 of no group: %v, want refused as not in group lab1", round+1, err)
		}
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				target := filepath.Join(disks, fmt.Sprintf("pc%02d-%d", i+1, round))
				if _, err := node.Run(ctx, node.Config{Server: listen, Target: target, Name: fmt.Sprintf("pc%02d", i+1),
					DataListen: "127.0.0.1:0", NoProbe: true, JoinTimeout: 30 * time.Second}); err != nil {
					t.Errorf("round %d: pc%02d: %v", round+1, i+1, err)
					return
				}
				want, _ := testimage.SHA256(filepath.Join(dir, image), -1)
				if got, _ := testimage.SHA256(target, size); got != want {
					t.Errorf("round %d: pc%02d holds %.12s, the image is %.12s", round+1, i+1, got, want)
				}
			}()
		}
		wg.Wait()
	}
	// Both casts are over and verified, newest first; the library knows
	// their images' digests now.
	deadline := time.Now().Add(30 * time.Second)
	var casts []Cast
	for {
		resp, err := http.Get(api.URL + "/api/casts")
		if err != nil {
			t.Fatal(err)
		}
		casts = nil
		json.NewDecoder(resp.Body).Decode(&casts)
		resp.Body.Close()
		if len(casts) == 2 && casts[0].State != Running && casts[1].State != Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("casts did not end: %+v", casts)
		}
		time.Sleep(50 * time.Millisecond) // polling the API, as a page does
	}
	if casts[0].Request.Image != "second.img" || casts[0].State != Verified || casts[1].State != Verified || casts[0].Summary.Verified != 2 {
		b, _ := json.MarshalIndent(casts, "", " ")
		t.Errorf("casts:\n%s", b)
	}
	imgs, _ := lib.Images()
	for _, img := range imgs {
		if img.Digest == "" {
			t.Errorf("the library does not know %s's digest after casting it", img.Name)
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Error(err)
	}
}

// Stopping a cast the moment it is taken from the queue, before it has
// begun, neither panics nor leaves it running.
func TestAbortAsACastStarts(t *testing.T) {
	dir := t.TempDir()
	if err := testimage.Write(filepath.Join(dir, "nt.img"), 1<<20, 1, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	lib, _ := NewLibrary(dir)
	svc, _ := New(Config{Library: lib, Base: server.Config{Listen: "127.0.0.1:0", Out: io.Discard}})
	c, err := svc.Submit(Request{Image: "nt.img", Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, ctx, cancel := svc.next(t.Context())
	defer cancel()
	if got == nil || got.ID != c.ID {
		t.Fatalf("next = %v, want cast %d", got, c.ID)
	}
	if err := svc.Abort(c.ID); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Fatal("the cast's context is not cancelled")
	}
	svc.run(ctx, got)
	if casts := svc.Casts(); casts[0].State != Aborted || casts[0].Summary.Started {
		t.Errorf("cast stopped before it began: %+v", casts[0])
	}
}
