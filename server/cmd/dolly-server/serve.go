package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"dolly/internal/cli"
	"dolly/server"
	"dolly/server/service"
)

// newService sets up dolly-server -serve: the library in dir, the groups
// file (if any) and the admin token.
func newService(dir, groupsFile, tokenFile string, base server.Config) (*service.Service, service.Groups, string, error) {
	lib, err := service.NewLibrary(dir)
	if err != nil {
		return nil, nil, "", err
	}
	var groups service.Groups
	if groupsFile != "" {
		f, err := os.Open(groupsFile)
		if err != nil {
			return nil, nil, "", fmt.Errorf("-groups: %w", err)
		}
		groups, err = service.ReadGroups(f)
		f.Close()
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s: %w", groupsFile, err)
		}
	}
	if tokenFile == "" {
		tokenFile = filepath.Join(dir, ".dolly-admin-token")
	}
	token, made, err := adminToken(tokenFile)
	if err != nil {
		return nil, nil, "", err
	}
	if made {
		fmt.Fprintf(base.Out, "dolly-server: made an admin token in %s (queueing and aborting casts need it)\n", tokenFile)
	}
	svc, err := service.New(service.Config{Library: lib, Groups: groups, Base: base, Done: func(c service.Cast) {
		fmt.Fprintf(base.Out, "dolly-server: cast %d of %s is over: %s\n", c.ID, c.Request.Image, c.State)
	}})
	return svc, groups, token, err
}

// adminToken reads the token in path, or makes one there (readable by its
// owner only) if there is none.
func adminToken(path string) (token string, made bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, false, nil
		}
		return "", false, fmt.Errorf("admin token file %s is empty", path)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	raw := make([]byte, 24)
	rand.Read(raw)
	token = hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	if _, err := fmt.Fprintln(f, token); err != nil {
		f.Close()
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	return token, true, f.Close()
}

// warnUnbootable says which groups netboot cannot answer: DHCP knows a PC
// only by its MAC, so a group that names its machines by node name only
// reaches none of them under -boot.
func warnUnbootable(groups service.Groups, out io.Writer) {
	for _, g := range groups.WithoutMACs() {
		fmt.Fprintf(out, "dolly-server: warning: group %s names no MAC address: under -boot its PCs get no DHCP answer (list their MACs; names still admit PCs that boot otherwise)\n", g)
	}
}

// withAPI serves /api/ with the service's handler and the rest with page.
func withAPI(page, api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", api)
	mux.Handle("/", page)
	return mux
}

// servicePolicy netboots, in service mode, the listed machines (every one
// without groups) into the node while a cast for them is queued or runs,
// and sends them to their own disks otherwise.
func servicePolicy(svc *service.Service, groups service.Groups) bootPolicy {
	p := bootPolicy{why: func(mac string) string {
		group, ok := svc.Group()
		switch {
		case svc.Verified(mac):
			return "verified in the cast that runs"
		case !ok:
			return "no cast is queued"
		case group != "" && !groups.Admits(group, "", []string{mac}):
			return "the cast queued is for group " + group
		}
		return ""
	}}
	if groups != nil {
		p.answer = groups.Listed
	}
	return p
}

const castUsage = `dolly-server cast queues a cast on a dolly-server running with -serve.

Usage:
  dolly-server cast -image NAME [-group GROUP] [-nodes N] [-target DEV] [-plan auto|chain|star|tree:N]
                    [-server URL] [-admin-token FILE] [-wait]

The image is a file name in the server's library (-images DIR). With
-groups on the server, the cast is for one group of machines and waits for
all of them unless -nodes says how many. -wait follows the cast until it is
over and exits as dolly-server does for one cast.

` + cli.ExitCodes + `
Examples:
  dolly-server cast -image win11.img.zst -group lab1 -target disk:first
  dolly-server cast -server http://198.18.0.1:9701 -admin-token token -image nt.img -nodes 8 -wait

Options:
`

// queueCast is "dolly-server cast": it asks a running service for a cast.
func queueCast(args []string) int {
	fs := pflag.NewFlagSet("dolly-server cast", pflag.ContinueOnError)
	url := fs.String("server", "http://127.0.0.1:9701", "the service's status page address")
	tokenFile := fs.String("admin-token", "", "file holding the admin token (default: the library's .dolly-admin-token, when -images names it)")
	images := fs.String("images", "", "the server's image library, to find its admin token in")
	var req service.Request
	fs.StringVar(&req.Image, "image", "", "image to cast: a file name in the server's library (required)")
	fs.StringVar(&req.Group, "group", "", "the group of machines the cast is for")
	fs.IntVar(&req.Nodes, "nodes", 0, "how many nodes to wait for (default: every machine the group names)")
	fs.StringVar(&req.Target, "target", "", "the target on every node that names none")
	fs.StringVar(&req.Plan, "plan", "auto", "auto, chain, star or tree:N")
	wait := fs.Bool("wait", false, "follow the cast until it is over")
	if code := cli.Parse(fs, castUsage, args); code >= 0 {
		return code
	}
	usageErr := func(format string, a ...any) int { return cli.UsageError("dolly-server cast", format, a...) }
	switch {
	case req.Image == "":
		return usageErr("-image is required")
	case *tokenFile == "" && *images == "":
		return usageErr("-admin-token FILE is required (or -images DIR, whose .dolly-admin-token it is)")
	case *tokenFile == "":
		*tokenFile = filepath.Join(*images, ".dolly-admin-token")
	}
	b, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server cast: admin token: %v\n", err)
		return cli.ExitNotStarted
	}
	base := strings.TrimSuffix(*url, "/")
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest("POST", base+"/api/casts", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	hr.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(hr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server cast: %v (is dolly-server -serve running there?)\n", err)
		return cli.ExitNotStarted
	}
	var c service.Cast
	err = decodeReply(resp, &c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dolly-server cast: %v\n", err)
		return cli.ExitNotStarted
	}
	fmt.Printf("queued cast %d: %s for %s\n", c.ID, c.Request.Image, describeFor(c.Request))
	if !*wait {
		return cli.ExitOK
	}
	return follow(client, base, c.ID)
}

func describeFor(r service.Request) string {
	if r.Group != "" {
		return fmt.Sprintf("group %s (%d nodes)", r.Group, r.Nodes)
	}
	return fmt.Sprintf("%d nodes", r.Nodes)
}

// follow polls the service until cast id is over, saying when its state
// changes, and returns the exit code of its outcome.
func follow(client *http.Client, base string, id int) int {
	last := ""
	for {
		resp, err := client.Get(base + "/api/casts")
		if err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server cast: %v\n", err)
			return cli.ExitFailed
		}
		var casts []service.Cast
		if err := decodeReply(resp, &casts); err != nil {
			fmt.Fprintf(os.Stderr, "dolly-server cast: %v\n", err)
			return cli.ExitFailed
		}
		i := slices.IndexFunc(casts, func(c service.Cast) bool { return c.ID == id })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "dolly-server cast: the server no longer lists cast %d (restarted?)\n", id)
			return cli.ExitFailed
		}
		for _, c := range casts[i : i+1] {
			if c.State != last {
				last = c.State
				fmt.Printf("cast %d: %s\n", id, c.State)
			}
			switch c.State {
			case service.Verified:
				fmt.Printf("cast %d: %d of %d nodes verified in %.1fs\n", id, c.Summary.Verified, len(c.Summary.Nodes), c.Summary.ElapsedSeconds)
				return cli.ExitOK
			case service.Failed:
				fmt.Printf("cast %d: %s\n", id, c.Error)
				return cli.ExitFailed
			case service.NotStarted, service.Aborted:
				fmt.Printf("cast %d: %s\n", id, c.Error)
				if c.Summary != nil && c.Summary.Started {
					return cli.ExitFailed // stopped once targets were written to
				}
				return cli.ExitNotStarted
			}
		}
		time.Sleep(time.Second) // the service is polled, as a page would
	}
}

// decodeReply reads a JSON reply into v, or the error the API gave.
func decodeReply(resp *http.Response, v any) error {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}
