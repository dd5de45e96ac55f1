package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"dolly/capacity"
)

// testTree plants nodes n1…nN along parent (parent[0] = -1 for the
// source) and returns the tree with the nodes by name.
func testTree(t *testing.T, parent ...int) (*castTree, map[string]*nodeState) {
	t.Helper()
	plan := capacity.Tree{Parent: parent}
	if err := plan.Validate(); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*nodeState{}
	var nodes []*nodeState
	for v := 1; v < len(parent); v++ {
		n := &nodeState{name: fmt.Sprintf("n%d", v)}
		nodes = append(nodes, n)
		byName[n.name] = n
	}
	return plantTree(plan, nodes), byName
}

// shortName names the source "source", for tests to read.
func (v *vertex) shortName() string {
	if v.isSource() {
		return "source"
	}
	return v.name()
}

// String renders the tree as "source(n1(n2) n3)", children in order.
func (t *castTree) String() string {
	var b strings.Builder
	var walk func(v *vertex)
	walk = func(v *vertex) {
		b.WriteString(v.shortName())
		if len(v.children) == 0 {
			return
		}
		b.WriteString("(")
		for i, c := range v.children {
			if i > 0 {
				b.WriteString(" ")
			}
			if c.parent != v || c.place != inTree {
				fmt.Fprintf(&b, "!%s!", c.shortName()) // a link the vertex does not agree with
			}
			walk(c)
		}
		b.WriteString(")")
	}
	walk(t.root)
	return b.String()
}

// String renders the rewiring as "-up→node +up→node", cuts first.
func (r rewiring) String() string {
	var parts []string
	for _, l := range r.cut {
		parts = append(parts, "-"+l.up.shortName()+"→"+l.node.name)
	}
	for _, l := range r.added {
		parts = append(parts, "+"+l.up.shortName()+"→"+l.node.name)
	}
	return strings.Join(parts, " ")
}

func TestPlantTreeKeepsThePlansShape(t *testing.T) {
	for _, tc := range []struct {
		plan capacity.Tree
		want string
	}{
		{capacity.Chain(3), "source(n1(n2(n3)))"},
		{capacity.Star(3), "source(n1 n2 n3)"},
		{capacity.NaryTree(6, 2), "source(n1(n3 n4) n2(n5 n6))"},
	} {
		tr, byName := testTree(t, tc.plan.Parent...)
		if got := tr.String(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.plan.Kind, got, tc.want)
		}
		for name, n := range byName {
			if tr.placeOf(n) != inTree || tr.upstream(n) == nil {
				t.Errorf("%s: %s is not in the tree", tc.plan.Kind, name)
			}
		}
		if got, want := len(tr.sourceChildren()), len(tc.plan.Children(0)); got != want {
			t.Errorf("%s: the source has %d children, want %d", tc.plan.Kind, got, want)
		}
	}
	if tr := newCastTree(); tr.placeOf(&nodeState{}) != notInTree || tr.upstream(&nodeState{}) != nil {
		t.Error("a node never placed is in the tree")
	}
}

// treeStep is one change of a tree in a test: "remove x", "toSource c
// from", "rejoin n", and the rewiring it must return ("" for none; "no"
// for a change that must not happen).
type treeStep struct {
	op   string
	want string
}

func TestCastTreeRewires(t *testing.T) {
	chain4 := []int{-1, 0, 1, 2, 3}       // source → n1 → n2 → n3 → n4
	binary := []int{-1, 0, 0, 1, 1, 2, 2} // source(n1(n3 n4) n2(n5 n6))
	for _, tc := range []struct {
		name   string
		parent []int
		gone   []string // nodes gone after their verdict: they serve no one
		steps  []treeStep
		want   string
		out    []string // nodes taken out at the end
	}{
		{
			name: "a middle node of a chain", parent: chain4,
			steps: []treeStep{{"remove n2", "-n1→n2 +n1→n3"}},
			want:  "source(n1(n3(n4)))", out: []string{"n2"},
		},
		{
			name: "the leaf of a chain", parent: chain4,
			steps: []treeStep{{"remove n4", "-n3→n4"}},
			want:  "source(n1(n2(n3)))", out: []string{"n4"},
		},
		{
			name: "the source's child", parent: chain4,
			steps: []treeStep{{"remove n1", "-source→n1 +source→n2"}},
			want:  "source(n2(n3(n4)))", out: []string{"n1"},
		},
		{
			name: "a node with children in a tree", parent: binary,
			steps: []treeStep{{"remove n1", "-source→n1 +source→n3 +source→n4"}},
			want:  "source(n2(n5 n6) n3 n4)", out: []string{"n1"},
		},
		{
			name: "a node whose parent is gone", parent: chain4, gone: []string{"n2"},
			steps: []treeStep{{"remove n3", "-n2→n3 +n1→n4"}},
			want:  "source(n1(n2 n4))", out: []string{"n3"},
		},
		{
			name: "a node whose upstreams are all gone", parent: chain4, gone: []string{"n1", "n2"},
			steps: []treeStep{{"remove n3", "-n2→n3 +source→n4"}},
			want:  "source(n1(n2) n4)", out: []string{"n3"},
		},
		{
			name: "the gone node itself", parent: chain4, gone: []string{"n2"},
			steps: []treeStep{{"remove n2", "-n1→n2 +n1→n3"}},
			want:  "source(n1(n3(n4)))", out: []string{"n2"},
		},
		{
			name: "twice, and one never placed", parent: chain4,
			steps: []treeStep{{"remove n2", "-n1→n2 +n1→n3"}, {"remove n2", "no"}, {"remove stranger", "no"}},
			want:  "source(n1(n3(n4)))", out: []string{"n2"},
		},
		{
			name: "attach failed: the source takes the child", parent: chain4,
			steps: []treeStep{{"toSource n3 n2", "+source→n3"}},
			want:  "source(n1(n2) n3(n4))",
		},
		{
			name: "attach failed from a node that is not the upstream", parent: chain4,
			steps: []treeStep{{"toSource n3 n1", "no"}, {"toSource stranger n1", "no"}},
			want:  "source(n1(n2(n3(n4))))",
		},
		{
			name: "attach failed for a child taken out meanwhile", parent: chain4,
			steps: []treeStep{{"remove n3", "-n2→n3 +n2→n4"}, {"toSource n3 n2", "no"}},
			want:  "source(n1(n2(n4)))", out: []string{"n3"},
		},
		{
			name: "attach failed after the child was rewired", parent: chain4,
			steps: []treeStep{{"remove n2", "-n1→n2 +n1→n3"}, {"toSource n3 n1", "+source→n3"}},
			want:  "source(n1 n3(n4))", out: []string{"n2"},
		},
		{
			name: "back after a failure: under the deepest", parent: chain4,
			steps: []treeStep{{"remove n2", "-n1→n2 +n1→n3"}, {"rejoin n2", "+n4→n2"}},
			want:  "source(n1(n3(n4(n2))))",
		},
		{
			name: "back: the first of the deepest", parent: binary,
			steps: []treeStep{{"remove n4", "-n1→n4"}, {"rejoin n4", "+n3→n4"}},
			want:  "source(n1(n3(n4)) n2(n5 n6))",
		},
		{
			name: "back: a gone node is passed over, not the nodes below it", parent: chain4, gone: []string{"n1", "n3"},
			steps: []treeStep{{"remove n4", "-n3→n4"}, {"rejoin n4", "+n2→n4"}},
			want:  "source(n1(n2(n3 n4)))",
		},
		{
			name: "back when no node serves: under the source", parent: chain4, gone: []string{"n1", "n2", "n3"},
			steps: []treeStep{{"remove n4", "-n3→n4"}, {"rejoin n4", "+source→n4"}},
			want:  "source(n1(n2(n3)) n4)",
		},
		{
			name: "back after several failures", parent: binary,
			steps: []treeStep{
				{"remove n1", "-source→n1 +source→n3 +source→n4"},
				{"remove n5", "-n2→n5"},
				{"rejoin n5", "+n6→n5"},
				{"remove n6", "-n2→n6 +n2→n5"},
				{"rejoin n1", "+n5→n1"},
			},
			want: "source(n2(n5(n1)) n3 n4)", out: []string{"n6"},
		},
		{
			name: "back again while in the tree: it moves with its children", parent: binary,
			steps: []treeStep{{"rejoin n1", "-source→n1 +n5→n1"}},
			want:  "source(n2(n5(n1(n3 n4)) n6))",
		},
		{
			name: "back twice before the first was handled", parent: chain4,
			steps: []treeStep{{"remove n1", "-source→n1 +source→n2"}, {"rejoin n1", "+n4→n1"}, {"rejoin n1", "-n4→n1 +n4→n1"}},
			want:  "source(n2(n3(n4(n1))))",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, byName := testTree(t, tc.parent...)
			serves := func(n *nodeState) bool { return !slices.Contains(tc.gone, n.name) }
			node := func(name string) *nodeState {
				if n, ok := byName[name]; ok {
					return n
				}
				return &nodeState{name: name} // one the tree never saw
			}
			for _, st := range tc.steps {
				f := strings.Fields(st.op)
				var r rewiring
				ok := true
				switch f[0] {
				case "remove":
					r, ok = tr.remove(node(f[1]), serves)
				case "toSource":
					r, ok = tr.toSource(node(f[1]), node(f[2]))
				case "rejoin":
					r = tr.rejoin(node(f[1]), serves)
				default:
					t.Fatalf("unknown step %q", st.op)
				}
				got := r.String()
				if !ok {
					got = "no"
				}
				if got != st.want {
					t.Errorf("%s: %q, want %q (tree %s)", st.op, got, st.want, tr)
				}
			}
			if got := tr.String(); got != tc.want {
				t.Errorf("tree %s, want %s", got, tc.want)
			}
			for name, n := range byName {
				want := inTree
				if slices.Contains(tc.out, name) {
					want = takenOut
				}
				if got := tr.placeOf(n); got != want {
					t.Errorf("%s: place %d, want %d", name, got, want)
				}
				if want == inTree && !tr.feeds(tr.upstream(n).node, n) && !tr.upstream(n).isSource() {
					t.Errorf("%s: its upstream does not feed it", name)
				}
			}
		})
	}
}

// A node that holds the others back goes under the deepest node that
// serves, paced; its children go to its upstream.
func TestCastTreeMovesASlowNodeApart(t *testing.T) {
	all := func(*nodeState) bool { return true }
	tests := []struct {
		name     string
		parent   []int
		slow     string
		serves   func(*nodeState) bool
		finished []string // nodes that have their verdict
		wantTree string
		wantWire string
		wantOK   bool
	}{
		{"middle of a chain", []int{-1, 0, 1, 2, 3}, "n2", all, nil,
			"source(n1(n3(n4(n2))))", "-n2→n3 -n1→n2 +n1→n3 +n4→n2", true},
		{"head of a chain", []int{-1, 0, 1, 2}, "n1", all, nil,
			"source(n2(n3(n1)))", "-n1→n2 -source→n1 +source→n2 +n3→n1", true},
		{"tail of a chain", []int{-1, 0, 1, 2}, "n3", all, nil,
			"source(n1(n2(n3)))", "-n2→n3 +n2→n3", true},
		{"a leaf of a tree", []int{-1, 0, 1, 1}, "n2", all, nil,
			"source(n1(n3(n2)))", "-n1→n2 +n3→n2", true},
		{"alone", []int{-1, 0}, "n1", all, nil, "source(n1)", "", false},
		{"the only server is gone", []int{-1, 0, 1}, "n1", func(n *nodeState) bool { return n.name != "n2" }, nil,
			"source(n1(n2))", "", false},
		{"a star's finished leaves leave", []int{-1, 0, 0, 0}, "n2", all, []string{"n1", "n3"},
			"source(n1 n2 n3)", "", false},
		{"a star's leaf still casting", []int{-1, 0, 0, 0}, "n2", all, []string{"n1"},
			"source(n1 n3(n2))", "-source→n2 +n3→n2", true},
		{"a finished relay stays for its children, a finished leaf does not", []int{-1, 0, 1, 1}, "n3", all, []string{"n1", "n2"},
			"source(n1(n2 n3))", "-n1→n3 +n1→n3", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, by := testTree(t, tt.parent...)
			for _, name := range tt.finished {
				by[name].status = stDone
			}
			r, _, ok := tr.moveApart(by[tt.slow], tt.serves)
			if ok != tt.wantOK || tr.String() != tt.wantTree || r.String() != tt.wantWire {
				t.Fatalf("moveApart(%s) = %q, %v; tree %s; want %q, %v; tree %s", tt.slow, r, ok, tr, tt.wantWire, tt.wantOK, tt.wantTree)
			}
			if ok && !tr.paced(by[tt.slow]) {
				t.Errorf("%s is not served at its pace", tt.slow)
			}
		})
	}
}
