package service

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// Groups are the machines each cast may be for: a group's name and the
// patterns (path.Match, as "pc*" or "52:54:00:*") its machines' names or
// MAC addresses match.
type Groups map[string][]string

// ReadGroups reads a groups file: one group per line, its name, a colon
// and its patterns, separated by spaces or commas; # starts a comment.
//
//	lab1: pc01 pc02 52:54:00:12:34:56
//	lab2: lab2-*
func ReadGroups(r io.Reader) (Groups, error) {
	g := Groups{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(text) == "" {
			continue
		}
		name, list, ok := strings.Cut(text, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t,") {
			return nil, fmt.Errorf("line %d: want \"group: pattern pattern ...\"", line)
		}
		if _, dup := g[name]; dup {
			return nil, fmt.Errorf("line %d: group %q is listed twice", line, name)
		}
		pats := strings.FieldsFunc(list, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' })
		if len(pats) == 0 {
			return nil, fmt.Errorf("line %d: group %q lists no machines", line, name)
		}
		for i, p := range pats {
			p = strings.ToLower(p)
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("line %d: pattern %q: %w", line, p, err)
			}
			pats[i] = p
		}
		g[name] = pats
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(g) == 0 {
		return nil, fmt.Errorf("no groups")
	}
	return g, nil
}

// Admits says whether a machine of this name and these MACs belongs to
// group.
func (g Groups) Admits(group, name string, macs []string) bool {
	for _, p := range g[group] {
		for _, s := range append([]string{name}, macs...) {
			if ok, _ := path.Match(p, strings.ToLower(s)); ok {
				return true
			}
		}
	}
	return false
}

// Listed says whether the machine with this MAC is in any group: the only
// machines a netboot service in service mode answers.
func (g Groups) Listed(mac string) bool {
	return slices.ContainsFunc(g.names(), func(group string) bool { return g.Admits(group, "", []string{mac}) })
}

// Size is how many machines group has when it names each (no wildcards),
// 0 otherwise: how many nodes a cast for it waits for, unless told.
func (g Groups) Size(group string) int {
	for _, p := range g[group] {
		if strings.ContainsAny(p, "*?[") {
			return 0
		}
	}
	return len(g[group])
}

// WithoutMACs lists the groups none of whose patterns can match a MAC
// address (they name nodes): netboot, which knows only MACs, reaches none
// of their machines.
func (g Groups) WithoutMACs() []string {
	var out []string
	for _, name := range g.names() {
		if !slices.ContainsFunc(g[name], func(p string) bool { return strings.Contains(p, ":") || p == "*" }) {
			out = append(out, name)
		}
	}
	return out
}

func (g Groups) names() []string {
	var names []string
	for n := range g {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
