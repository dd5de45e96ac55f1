// Package service keeps dolly-server running between casts (dolly-server
// -serve): an image library, groups of machines, and a queue of casts the
// admin fills from the status page or the command line, run one after the
// other with the same services.
package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"dolly/capacity"
	"dolly/server"
)

// Config is what every cast of the service shares.
type Config struct {
	Library *Library
	Groups  Groups // nil: any machine may join any cast
	// Base is every cast's server configuration; Image, Nodes, Target,
	// Shape and Admit are the request's.
	Base server.Config
	// Done, if set, is told of each cast once it is over.
	Done func(Cast)
}

// Request is a cast the admin asks for.
type Request struct {
	Image  string `json:"image"`           // a name in the library
	Group  string `json:"group,omitempty"` // the machines it is for ("": any)
	Nodes  int    `json:"nodes,omitempty"` // how many to wait for; 0: every machine the group names
	Target string `json:"target,omitempty"`
	// Plan is auto (default), chain, star or tree:N.
	Plan string `json:"plan,omitempty"`
}

// Cast is a request in the queue, running, or done.
type Cast struct {
	ID      int            `json:"id"`
	Request Request        `json:"request"`
	State   string         `json:"state"` // queued, running, verified, failed, not-started, aborted
	Queued  time.Time      `json:"queued"`
	Started time.Time      `json:"started,omitzero"`
	Ended   time.Time      `json:"ended,omitzero"`
	Error   string         `json:"error,omitempty"`
	Summary *server.Report `json:"summary,omitempty"`
}

// The states of a cast.
const (
	Queued     = "queued"
	Running    = "running"
	Verified   = "verified"
	Failed     = "failed"
	NotStarted = "not-started"
	Aborted    = "aborted"
)

// maxHistory bounds the casts kept once over.
const maxHistory = 50

// Service runs the queued casts one at a time.
type Service struct {
	cfg     Config
	mu      sync.Mutex
	casts   []*Cast // queued and running first, in order, then the history, newest first
	nextID  int
	abort   context.CancelFunc // the running cast's
	stopped bool               // the admin stopped the running cast
	// verified are the MACs of the PCs the running cast has verified:
	// netbooting again (-after reboot), they go to their own disks.
	verified map[string]bool
	wake     chan struct{}
}

// New returns a service with an empty queue.
func New(cfg Config) (*Service, error) {
	if cfg.Library == nil {
		return nil, errors.New("service: no image library")
	}
	return &Service{cfg: cfg, nextID: 1, wake: make(chan struct{}, 1)}, nil
}

// Submit checks r and queues it.
func (s *Service) Submit(r Request) (Cast, error) {
	if _, err := s.cfg.Library.Path(r.Image); err != nil {
		return Cast{}, err
	}
	if _, _, err := parsePlan(r.Plan); err != nil {
		return Cast{}, err
	}
	switch {
	case r.Group != "" && s.cfg.Groups == nil:
		return Cast{}, fmt.Errorf("no groups are defined (dolly-server -groups FILE): leave the group out")
	case r.Group != "" && s.cfg.Groups[r.Group] == nil:
		return Cast{}, fmt.Errorf("no group %q: the groups are %v", r.Group, s.cfg.Groups.names())
	case r.Group == "" && s.cfg.Groups != nil:
		return Cast{}, fmt.Errorf("name the group of machines the cast is for: one of %v", s.cfg.Groups.names())
	case r.Nodes < 0:
		return Cast{}, errors.New("nodes must be positive")
	}
	if r.Nodes == 0 && r.Group == "" {
		return Cast{}, errors.New("say how many nodes to wait for")
	}
	if r.Nodes == 0 {
		if r.Nodes = s.cfg.Groups.Size(r.Group); r.Nodes == 0 {
			return Cast{}, fmt.Errorf("say how many nodes to wait for: group %q names its machines by patterns", r.Group)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &Cast{ID: s.nextID, Request: r, State: Queued, Queued: time.Now()}
	s.nextID++
	// After the queued and running ones, before the history.
	i := slices.IndexFunc(s.casts, func(c *Cast) bool { return c.State != Queued && c.State != Running })
	if i < 0 {
		i = len(s.casts)
	}
	s.casts = slices.Insert(s.casts, i, c)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return *c, nil
}

// Abort takes the cast with this id out of the queue, or stops it if it
// runs.
func (s *Service) Abort(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.casts {
		if c.ID != id {
			continue
		}
		switch c.State {
		case Queued:
			c.State, c.Ended = Aborted, time.Now()
			s.sortLocked()
			return nil
		case Running:
			s.stopped = true
			s.abort()
			return nil
		}
		return fmt.Errorf("cast %d is over (%s)", id, c.State)
	}
	return fmt.Errorf("no cast %d", id)
}

// Casts lists the queue, then the history, newest first.
func (s *Service) Casts() []Cast {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Cast, len(s.casts))
	for i, c := range s.casts {
		out[i] = *c
	}
	return out
}

// Group is the group of the cast that runs or comes next, and whether
// there is one: who a netboot service sends into the node now.
func (s *Service) Group() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.casts {
		if c.State == Running || c.State == Queued {
			return c.Request.Group, true
		}
	}
	return "", false
}

// Run runs the queued casts one after the other until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	for {
		c, castCtx, cancel := s.next(ctx)
		if c == nil {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		s.run(castCtx, c)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// next marks the first queued cast running and returns it with the
// context it runs under, which Abort cancels; nil if none is queued.
func (s *Service) next(ctx context.Context) (*Cast, context.Context, context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.casts {
		if c.State == Queued {
			c.State, c.Started = Running, time.Now()
			castCtx, cancel := context.WithCancel(ctx)
			s.abort, s.stopped, s.verified = cancel, false, map[string]bool{}
			return c, castCtx, cancel
		}
	}
	return nil, nil, nil
}

// Verified says whether the PC with this MAC was verified by the cast that
// runs now.
func (s *Service) Verified(mac string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verified[strings.ToLower(mac)]
}

func (s *Service) run(ctx context.Context, c *Cast) {
	cfg := s.cfg.Base
	cfg.Verified = func(node string, macs []string) {
		s.mu.Lock()
		for _, m := range macs {
			s.verified[strings.ToLower(m)] = true
		}
		s.mu.Unlock()
	}
	r := c.Request
	cfg.Image, _ = s.cfg.Library.Path(r.Image)
	cfg.Nodes, cfg.Yes = r.Nodes, true
	if r.Target != "" {
		cfg.Target = r.Target // else the service's -target
	}
	cfg.Shape, cfg.Fanout, _ = parsePlan(r.Plan)
	if r.Group != "" {
		group := r.Group
		cfg.Admit = func(name string, macs []string) string {
			if s.cfg.Groups.Admits(group, name, macs) {
				return ""
			}
			return fmt.Sprintf("%s is not in group %s, which this cast is for", name, group)
		}
	}
	sum, err := server.Run(ctx, cfg)
	report := server.NewReport(sum)
	s.mu.Lock()
	c.Ended, c.Summary, s.abort, s.verified = time.Now(), &report, nil, nil
	switch {
	case err == nil:
		c.State = Verified
	case s.stopped:
		c.State, c.Error = Aborted, "stopped by the admin"
		if sum.Started {
			c.Error += " during the cast: the targets may be part written"
		}
	case ctx.Err() != nil:
		c.State, c.Error = Failed, "dolly-server was stopped"
		if !sum.Started {
			c.State = NotStarted
		}
	case !sum.Started:
		c.State, c.Error = NotStarted, err.Error()
	default:
		c.State, c.Error = Failed, err.Error()
	}
	s.sortLocked()
	done := *c
	s.mu.Unlock()
	if err == nil {
		s.cfg.Library.learn(r.Image, report.Digest)
	}
	if s.cfg.Done != nil {
		s.cfg.Done(done)
	}
}

// sortLocked puts the casts that are over after the queue, newest first,
// and forgets the oldest past maxHistory.
func (s *Service) sortLocked() {
	live := func(c *Cast) bool { return c.State == Queued || c.State == Running }
	slices.SortStableFunc(s.casts, func(a, b *Cast) int {
		switch {
		case live(a) && live(b):
			return a.ID - b.ID
		case live(a):
			return -1
		case live(b):
			return 1
		}
		return b.Ended.Compare(a.Ended)
	})
	if n := slices.IndexFunc(s.casts, func(c *Cast) bool { return !live(c) }); n >= 0 && len(s.casts)-n > maxHistory {
		s.casts = s.casts[:n+maxHistory]
	}
}

// parsePlan reads a request's plan: auto (or ""), chain, star or tree:N.
func parsePlan(p string) (capacity.Kind, int, error) {
	switch p {
	case "", "auto":
		return "", 0, nil
	case "chain":
		return capacity.KindChain, 0, nil
	case "star":
		return capacity.KindStar, 0, nil
	}
	var n int
	if _, err := fmt.Sscanf(p, "tree:%d", &n); err == nil && n >= 1 {
		return capacity.KindTree, n, nil
	}
	return "", 0, fmt.Errorf("plan %q: want auto, chain, star or tree:N", p)
}
