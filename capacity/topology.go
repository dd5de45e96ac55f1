// Package capacity holds dolly's analytical capacity model: the physical
// network, the resources of each node, the logical topologies a cast can use
// and the inequalities that bound the rate of a cast. It is pure computation:
// no I/O, so the planner can be tested and benchmarked on its own.
package capacity

import (
	"fmt"
	"strings"
)

// Kind names the shape of a logical topology.
type Kind string

const (
	KindChain    Kind = "chain"    // multi-drop chain: every node forwards to one more node
	KindTree     Kind = "tree"     // n-ary spanning tree filled breadth-first
	KindStar     Kind = "star"     // the source sends to every node itself
	KindExplicit Kind = "explicit" // any tree given vertex by vertex
)

// Tree is a logical topology: a spanning tree of logical channels rooted at
// the source. Vertex 0 is the source; vertices 1..n are the nodes in the
// order the planner placed them. Parent[0] is -1.
type Tree struct {
	Kind   Kind
	Fanout int // out-degree the shape was built with (1 for a chain, n for a star)
	Parent []int
}

// Chain returns a multi-drop chain over n nodes: source → 1 → 2 → … → n.
func Chain(n int) Tree {
	t := Tree{Kind: KindChain, Fanout: 1, Parent: make([]int, n+1)}
	for v := range t.Parent {
		t.Parent[v] = v - 1
	}
	return t
}

// NaryTree returns an n-ary spanning tree over n nodes, filled breadth-first:
// the source and every node send to at most fanout children.
func NaryTree(n, fanout int) Tree {
	if fanout < 1 {
		fanout = 1
	}
	t := Tree{Kind: KindTree, Fanout: fanout, Parent: make([]int, n+1)}
	t.Parent[0] = -1
	for v := 1; v <= n; v++ {
		t.Parent[v] = (v - 1) / fanout
	}
	if fanout == 1 {
		t.Kind = KindChain
	}
	return t
}

// Star returns a star over n nodes: the source sends to every node.
func Star(n int) Tree {
	t := Tree{Kind: KindStar, Fanout: n, Parent: make([]int, n+1)}
	t.Parent[0] = -1
	return t
}

// Explicit returns a tree from a parent list (parent[0] must be -1).
func Explicit(parent []int) (Tree, error) {
	t := Tree{Kind: KindExplicit, Parent: append([]int(nil), parent...)}
	if err := t.Validate(); err != nil {
		return Tree{}, err
	}
	for _, kids := range t.ChildLists() {
		t.Fanout = max(t.Fanout, len(kids))
	}
	return t, nil
}

// Nodes is the number of receiving nodes (vertices other than the source).
func (t Tree) Nodes() int { return len(t.Parent) - 1 }

// Children returns the children of vertex v in ascending order.
func (t Tree) Children(v int) []int {
	var c []int
	for w, p := range t.Parent {
		if p == v && w != 0 {
			c = append(c, w)
		}
	}
	return c
}

// ChildLists returns the children of every vertex at once, in O(n).
func (t Tree) ChildLists() [][]int {
	c := make([][]int, len(t.Parent))
	for w := 1; w < len(t.Parent); w++ {
		p := t.Parent[w]
		c[p] = append(c[p], w)
	}
	return c
}

// Depth returns the number of hops from the source to the deepest node.
func (t Tree) Depth() int {
	depth := make([]int, len(t.Parent))
	deepest := 0
	for v := 1; v < len(t.Parent); v++ {
		// Parents precede children in every shape built here; Validate
		// guarantees it for explicit trees too.
		depth[v] = depth[t.Parent[v]] + 1
		deepest = max(deepest, depth[v])
	}
	return deepest
}

// Validate checks that t is a tree rooted at vertex 0 whose parents come
// before their children.
func (t Tree) Validate() error {
	if len(t.Parent) == 0 || t.Parent[0] != -1 {
		return fmt.Errorf("topology: vertex 0 must be the source (parent -1)")
	}
	for v := 1; v < len(t.Parent); v++ {
		p := t.Parent[v]
		if p < 0 || p >= v {
			return fmt.Errorf("topology: vertex %d has parent %d; a parent must be an earlier vertex", v, p)
		}
	}
	return nil
}

// Name describes the shape briefly: "chain", "2-tree", "star".
func (t Tree) Name() string {
	switch t.Kind {
	case KindTree:
		return fmt.Sprintf("%d-tree", t.Fanout)
	case KindExplicit:
		return "tree"
	default:
		return string(t.Kind)
	}
}

// Format renders the tree for people, naming vertices with name(v).
// A chain prints as one arrow line; other shapes print indented.
func (t Tree) Format(name func(v int) string) string {
	var b strings.Builder
	if t.Kind == KindChain {
		for v := range t.Parent {
			if v > 0 {
				b.WriteString(" → ")
			}
			b.WriteString(name(v))
		}
		b.WriteString("\n")
		return b.String()
	}
	kids := t.ChildLists()
	var walk func(v, depth int)
	walk = func(v, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		if depth > 0 {
			b.WriteString("└ ")
		}
		b.WriteString(name(v))
		b.WriteString("\n")
		for _, w := range kids[v] {
			walk(w, depth+1)
		}
	}
	walk(0, 0)
	return b.String()
}
