package server

import (
	"fmt"
	"slices"

	"dolly/capacity"
)

// castTree is the tree the cast runs on: who sends the stream to whom. It
// starts as the plan's tree and changes as nodes fail, go away and come
// back. Its root is the source, a vertex like the others: every node in
// the tree has an upstream.
//
// The tree only records. Each change returns the rewiring that brings the
// nodes' data links in line with it, which the cast loop carries out. The
// Server's mutex guards it.
type castTree struct {
	root *vertex
	at   map[*nodeState]*vertex // every node ever placed, in the tree or not
}

// vertex is the source or a node.
type vertex struct {
	node     *nodeState // nil at the root: the source
	place    place
	parent   *vertex // its upstream while in the tree; nil at the root
	children []*vertex
	// paced says the node is served apart, at its own pace: its upstream
	// spools what it has not taken yet (see serveApart).
	paced bool
}

// place is where a node stands in the cast's tree.
type place int

const (
	notInTree place = iota // not placed: the cast has not started, or it came with the whole image
	inTree                 // gets the stream from its upstream and sends it on to its children
	takenOut               // taken out after it failed or went away; it may come back
)

func (v *vertex) isSource() bool { return v.node == nil }

func (v *vertex) name() string {
	if v.isSource() {
		return SourceName
	}
	return v.node.name
}

// link is one edge of the tree: up sends the stream to node.
type link struct {
	up   *vertex
	node *nodeState
}

// rewiring is what brings the data links in line with the tree after a
// change: the upstream of each cut link stops sending to its node, the
// upstream of each added link starts sending to its node from the byte
// the node has reached.
type rewiring struct {
	cut   []link
	added []link
}

// newCastTree is a tree of the source alone.
func newCastTree() *castTree {
	return &castTree{root: &vertex{place: inTree}, at: map[*nodeState]*vertex{}}
}

// plantTree lays the nodes out as the plan's tree: its vertex 0 is the
// source, vertex v is nodes[v-1]. Children keep the plan's order.
func plantTree(plan capacity.Tree, nodes []*nodeState) *castTree {
	t := newCastTree()
	vs := make([]*vertex, len(plan.Parent))
	vs[0] = t.root
	for v := 1; v < len(vs); v++ {
		vs[v] = &vertex{node: nodes[v-1]}
		t.at[nodes[v-1]] = vs[v]
	}
	for v := 1; v < len(vs); v++ {
		t.link(vs[plan.Parent[v]], vs[v])
	}
	return t
}

// add puts n in the tree under up, after up's other children, and
// returns n's vertex.
func (t *castTree) add(up *vertex, n *nodeState) *vertex {
	v := t.at[n]
	if v == nil {
		v = &vertex{node: n}
		t.at[n] = v
	}
	t.link(up, v)
	return v
}

// addPaced puts n, a node served apart, under up, which serves it at its
// own pace.
func (t *castTree) addPaced(up *vertex, n *nodeState) {
	t.add(up, n).paced = true
}

// vertexAt is the vertex of the plan's vertex v, planted with nodes.
func (t *castTree) vertexAt(nodes []*nodeState, v int) *vertex {
	if v == 0 {
		return t.root
	}
	return t.at[nodes[v-1]]
}

// paced reports whether n is served at its own pace.
func (t *castTree) paced(n *nodeState) bool {
	v := t.at[n]
	return v != nil && v.paced
}

// moveApart serves c, a node that holds the others back, apart: its
// children go to its upstream, and the deepest node that serves and is
// not served apart itself (the first met in the tree's order, among nodes
// as deep) serves c at c's own pace. ok is false, and nothing changes, if
// c is not in the tree or no other node could serve it.
func (t *castTree) moveApart(c *nodeState, serves func(*nodeState) bool) (r rewiring, leaf *vertex, ok bool) {
	v := t.at[c]
	if v == nil || v.place != inTree || v.paced {
		return rewiring{}, nil, false
	}
	var deepest int
	var walk func(u *vertex, d int)
	walk = func(u *vertex, d int) {
		for _, k := range u.children {
			if k != v && !k.paced && d > deepest && serves(k.node) && staysToServe(k) {
				leaf, deepest = k, d
			}
			if k != v {
				walk(k, d+1)
			}
		}
	}
	// c's children count at their depth after the move: one up.
	par := v.parent
	kids := v.children
	v.children = nil
	for _, k := range kids {
		t.link(par, k)
		r.cut = append(r.cut, link{up: v, node: k.node})
		r.added = append(r.added, link{up: par, node: k.node})
	}
	walk(t.root, 1)
	if leaf == nil {
		// Undo: no one else can serve it.
		for _, k := range kids {
			t.unlink(k)
			t.link(v, k)
		}
		return rewiring{}, nil, false
	}
	t.unlink(v)
	r.cut = append(r.cut, link{up: par, node: c})
	t.link(leaf, v)
	v.paced = true
	r.added = append(r.added, link{up: leaf, node: c})
	return r, leaf, true
}

// staysToServe reports whether v will be there to serve a node apart: one
// still casting, or one that relays to children and so stays until they
// have the stream. A leaf that has finished is on its way out (a star's
// leaves finish together, just when one node lags behind them).
func staysToServe(v *vertex) bool {
	return !v.node.finished() || len(v.children) > 0
}

// link makes up the upstream of v, a vertex not in the tree.
func (t *castTree) link(up, v *vertex) {
	v.place, v.parent = inTree, up
	up.children = append(up.children, v)
}

// unlink takes v from under its upstream.
func (t *castTree) unlink(v *vertex) {
	p := v.parent
	p.children = slices.DeleteFunc(p.children, func(c *vertex) bool { return c == v })
	v.parent = nil
}

// placeOf says where n stands.
func (t *castTree) placeOf(n *nodeState) place {
	if v := t.at[n]; v != nil {
		return v.place
	}
	return notInTree
}

// upstream is the vertex that sends n the stream, nil if n is not in the
// tree.
func (t *castTree) upstream(n *nodeState) *vertex {
	if v := t.at[n]; v != nil && v.place == inTree {
		return v.parent
	}
	return nil
}

// feeds reports whether the node up sends the stream to n.
func (t *castTree) feeds(up, n *nodeState) bool {
	p := t.upstream(n)
	return up != nil && p != nil && p.node == up
}

// sourceChildren lists the nodes the source sends the stream to.
func (t *castTree) sourceChildren() []*nodeState {
	out := make([]*nodeState, 0, len(t.root.children))
	for _, c := range t.root.children {
		out = append(out, c.node)
	}
	return out
}

// sourcePlanned lists the nodes the source sends the main stream to: its
// children but those served apart, which get streams of their own.
func (t *castTree) sourcePlanned() []*nodeState {
	var out []*nodeState
	for _, c := range t.root.children {
		if !c.paced {
			out = append(out, c.node)
		}
	}
	return out
}

// remove takes x, a node that failed or went away, out of the tree. Its
// upstream stops sending to it; its children go to the nearest upstream
// that still serves, skipping nodes for which serves is false (gone after
// their verdict). The source always serves. ok is false, and nothing
// changes, if x is not in the tree.
func (t *castTree) remove(x *nodeState, serves func(*nodeState) bool) (r rewiring, ok bool) {
	v := t.at[x]
	if v == nil || v.place != inTree {
		return rewiring{}, false
	}
	par := v.parent
	t.unlink(v)
	v.place = takenOut
	r.cut = append(r.cut, link{up: par, node: x})
	up := par
	for !up.isSource() && !serves(up.node) {
		up = up.parent
	}
	for _, k := range v.children {
		t.link(up, k)
		// Behind a node served apart, they are apart too: the new
		// upstream must not wait for them.
		k.paced = k.paced || v.paced
		r.added = append(r.added, link{up: up, node: k.node})
	}
	v.children = nil
	return r, true
}

// toSource hands c over from its upstream from to the source, when from's
// history no longer holds what c needs: from could not start sending to
// c, so there is nothing to cut. ok is false, and nothing changes, unless
// from is c's upstream.
func (t *castTree) toSource(c, from *nodeState) (r rewiring, ok bool) {
	if !t.feeds(from, c) {
		return rewiring{}, false
	}
	v := t.at[c]
	t.unlink(v)
	t.link(t.root, v)
	return rewiring{added: []link{{up: t.root, node: c}}}, true
}

// rejoin puts n, a node that came back, at the end of the line: under the
// deepest node that serves (the first met in the tree's order, among
// nodes as deep), or under the source if none does. A node that does not
// serve is passed over, the nodes below it are not. The rewiring adds
// exactly one link, n's.
//
// n is normally out of the tree. One still in it (it came back twice
// before the first return was handled) moves with the nodes below it.
func (t *castTree) rejoin(n *nodeState, serves func(*nodeState) bool) rewiring {
	var r rewiring
	v := t.at[n]
	if v != nil && v.place == inTree {
		r.cut = append(r.cut, link{up: v.parent, node: n})
		t.unlink(v)
	}
	tail, deepest := t.root, 0
	var walk func(u *vertex, d int)
	walk = func(u *vertex, d int) {
		for _, c := range u.children {
			if c == v {
				continue
			}
			if d > deepest && serves(c.node) && !c.paced {
				tail, deepest = c, d
			}
			walk(c, d+1)
		}
	}
	walk(t.root, 1)
	t.add(tail, n)
	r.added = append(r.added, link{up: tail, node: n})
	return r
}

// fed lists the nodes of the added links.
func (r rewiring) fed() []*nodeState {
	out := make([]*nodeState, 0, len(r.added))
	for _, l := range r.added {
		out = append(out, l.node)
	}
	return out
}

// members lists the nodes in the tree, parents before their children.
func (t *castTree) members() []*vertex {
	return t.below(func(*vertex) bool { return true })
}

// planned lists the nodes the plan runs on, parents before their
// children: the tree but the nodes served apart and those behind them.
func (t *castTree) planned() []*vertex {
	return t.below(func(v *vertex) bool { return !v.paced })
}

// below lists the nodes reached from the source through nodes that keep
// holds for, breadth first.
func (t *castTree) below(keep func(*vertex) bool) []*vertex {
	var out []*vertex
	queue := []*vertex{t.root}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, c := range u.children {
			if keep(c) {
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// shape is the plan's tree as the capacity model takes it: vertex 0 the
// source, the others in the order of planned, each with its parent. Nodes
// served apart are not in it.
func (t *castTree) shape() (capacity.Tree, []*nodeState) {
	vs := t.planned()
	index := map[*vertex]int{t.root: 0}
	parent := []int{-1}
	nodes := make([]*nodeState, 0, len(vs))
	for i, v := range vs {
		index[v] = i + 1
		parent = append(parent, index[v.parent])
		nodes = append(nodes, v.node)
	}
	tree, _ := capacity.Explicit(parent) // parents precede children: valid
	return tree, nodes
}

// reshape lays the plan's tree out anew as plan: its vertex 0 is the
// source, vertex v is nodes[v-1], and nodes must be exactly the nodes of
// planned. Each node whose upstream changes has its old link cut and its
// new one added; the others keep theirs, and nodes served apart stay with
// the node that serves them.
func (t *castTree) reshape(plan capacity.Tree, nodes []*nodeState) (rewiring, error) {
	if n := len(t.planned()); len(nodes) != n || len(plan.Parent) != len(nodes)+1 {
		return rewiring{}, fmt.Errorf("the new plan has %d nodes, the tree %d", len(plan.Parent)-1, n)
	}
	vs := make([]*vertex, len(plan.Parent))
	vs[0] = t.root
	was := map[*vertex]*vertex{}
	for v := 1; v < len(vs); v++ {
		x := t.at[nodes[v-1]]
		if x == nil || x.place != inTree || x.paced {
			return rewiring{}, fmt.Errorf("%s is not in the plan's tree", nodes[v-1].name)
		}
		vs[v], was[x] = x, x.parent
	}
	for _, v := range vs {
		v.children = slices.DeleteFunc(v.children, func(c *vertex) bool { return !c.paced })
	}
	var r rewiring
	for v := 1; v < len(vs); v++ {
		up := vs[plan.Parent[v]]
		t.link(up, vs[v])
		if old := was[vs[v]]; old != up {
			r.cut = append(r.cut, link{up: old, node: vs[v].node})
			r.added = append(r.added, link{up: up, node: vs[v].node})
		}
	}
	return r, nil
}
