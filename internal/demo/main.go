// Command demo is `make demo`: it makes a realistic sample image, casts it
// with dolly-server to 24 dolly nodes on this machine over loopback, checks
// every target's sha256 against the image and cleans up.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"dolly/internal/sampleimage"
	"dolly/internal/testimage"
	"dolly/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	nodes := flag.Int("nodes", 24, "number of local nodes")
	size := flag.Int64("size", 384<<20, "image size in bytes")
	files := flag.Int64("files", 140<<20, "bytes of real files in the image")
	bin := flag.String("bin", "bin", "directory holding dolly and dolly-server")
	topo := flag.String("topology", "-chain", "topology flag passed to dolly-server")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	dir, err := os.MkdirTemp("", "dolly-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	img := filepath.Join(dir, "nt.img")
	fmt.Printf("demo: building a %d MiB ext4 sample image from %d MiB of this machine's files…\n", *size>>20, *files>>20)
	if err := sampleimage.Build(ctx, img, sampleimage.Spec{Size: *size, Files: *files}); err != nil {
		return err
	}
	want, err := testimage.SHA256(img, -1)
	if err != nil {
		return err
	}
	fmt.Printf("demo: image sha256 %s\n", want[:16])

	// Each target holds some old data at its start, like a used disk.
	var targets []string
	for i := range *nodes {
		t := filepath.Join(dir, fmt.Sprintf("pc%02d.disk", i+1))
		if err := testimage.Fill(t, 0xEE, 8<<20); err != nil {
			return err
		}
		if err := os.Truncate(t, *size); err != nil {
			return err
		}
		targets = append(targets, t)
	}
	// A lab's image and disks sit on their disks long before a cast; the
	// demo's were just written, and their writeback would share this
	// machine's one disk with the nodes' probes and the cast.
	syscall.Sync()

	fmt.Printf("demo: dolly-server -image nt.img %s -nodes %d -yes, and %d nodes on 127.0.0.1\n\n", *topo, *nodes, *nodes)
	report := filepath.Join(dir, "report.json")
	// The server picks its own port and says which: a port picked here
	// and freed could be taken by anything before the server binds it.
	server := exec.CommandContext(ctx, filepath.Join(*bin, "dolly-server"), "-image", img, *topo,
		"-nodes", fmt.Sprint(*nodes), "-yes", "-listen", "127.0.0.1:0", "-progress-interval", "2s", "-report", report)
	out, err := server.StdoutPipe()
	if err != nil {
		return err
	}
	server.Stderr, server.Stdin = os.Stderr, os.Stdin
	if err := server.Start(); err != nil {
		return err
	}
	addr, copied, err := listenAddr(out, os.Stdout)
	if err != nil {
		server.Process.Kill()
		server.Wait()
		return err
	}
	var procs []*exec.Cmd
	for i, t := range targets {
		logf, err := os.Create(t + ".log")
		if err != nil {
			return err
		}
		defer logf.Close()
		n := exec.CommandContext(ctx, filepath.Join(*bin, "dolly"), "-server", addr, "-target", t,
			"-name", fmt.Sprintf("pc%02d", i+1), "-listen-data", "127.0.0.1:0", "-join-timeout", "30s")
		n.Stdout, n.Stderr = logf, logf
		if err := n.Start(); err != nil {
			return err
		}
		procs = append(procs, n)
	}
	var failed []string
	for i, n := range procs {
		if err := n.Wait(); err != nil {
			log, _ := os.ReadFile(targets[i] + ".log")
			failed = append(failed, fmt.Sprintf("pc%02d: %v\n%s", i+1, err, log))
		}
	}
	<-copied // Wait closes the pipe: all of the output first
	serverErr := server.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if serverErr != nil {
		failed = append(failed, fmt.Sprintf("dolly-server: %v", serverErr))
	}

	fmt.Println()
	ok := 0
	for i, t := range targets {
		got, err := testimage.SHA256(t, *size)
		if err == nil && got == want {
			ok++
			continue
		}
		failed = append(failed, fmt.Sprintf("pc%02d: target sha256 %.16s differs from the image's %.16s (%v)", i+1, got, want, err))
	}
	if len(failed) > 0 {
		for _, f := range failed {
			fmt.Fprintln(os.Stderr, f)
		}
		return errors.New("the demo cast failed")
	}
	r, err := readReport(report)
	if err != nil {
		return err
	}
	fmt.Printf("demo: %d of %d targets hold the image byte for byte (sha256 %.16s…), %s in all; cleaned up %s\n",
		ok, len(targets), want, time.Since(start).Round(100*time.Millisecond), dir)
	fmt.Printf("demo: from the last node joining to the plan: %.1fs (the probing node %.1fs, the %d nodes on this one machine measured together %.1fs, the model the rest)\n",
		r.JoinSeconds, r.JoinParts["probes"], len(targets), r.JoinParts["shared"])
	if r.Plan.SlowestPredictedMBps > 0 {
		// Like against like: the slowest node's rate over its time, the
		// model's over the ETA (start-up and the chain's lag included).
		fmt.Printf("demo: predicted %.1f MB/s, measured %.1f MB/s\n", r.Plan.SlowestPredictedMBps, r.Plan.MeasuredMBps)
	} else {
		fmt.Println("demo: the model made no prediction for this cast")
	}
	return nil
}

// readReport reads the report dolly-server wrote.
func readReport(path string) (server.Report, error) {
	var r server.Report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("dolly-server's report: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("dolly-server's report: %w", err)
	}
	return r, nil
}

// listenAddr copies the server's output to w until the line that says
// where it listens, returns that address, and copies the rest in the
// background until copied is closed.
func listenAddr(out io.Reader, w io.Writer) (addr string, copied <-chan struct{}, err error) {
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		io.WriteString(w, line)
		if _, addr, ok := strings.Cut(strings.TrimSpace(line), "listening on "); ok {
			done := make(chan struct{})
			go func() {
				defer close(done)
				io.Copy(w, r)
			}()
			return addr, done, nil
		}
		if err != nil {
			return "", nil, fmt.Errorf("dolly-server did not say where it listens: %w", err)
		}
	}
}
