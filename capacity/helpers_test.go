package capacity

import (
	"fmt"
	"math"
	"testing"
)

// oneSwitch builds a network of a source and n nodes on one switch, every
// host with the same link and resources.
func oneSwitch(n int, link float64, res Resources) Network {
	net := Network{Switches: []Switch{{Name: "sw"}}}
	net.Hosts = append(net.Hosts, Host{Name: "src", Switch: "sw", Link: link, Role: RoleSource, Resources: res})
	for i := 1; i <= n; i++ {
		net.Hosts = append(net.Hosts, Host{Name: fmt.Sprintf("n%02d", i), Switch: "sw", Link: link, Resources: res})
	}
	return net
}

// hostNames lists the names of the network's hosts in order.
func hostNames(net Network) []string {
	names := make([]string, len(net.Hosts))
	for i, h := range net.Hosts {
		names[i] = h.Name
	}
	return names
}

// mustEvaluate evaluates a plan over the network's hosts in file order.
func mustEvaluate(t testing.TB, net Network, tree Tree, comp Compression) Result {
	t.Helper()
	r, err := Evaluate(net, Plan{Tree: tree, Hosts: hostNames(net)[:len(tree.Parent)], Compression: comp}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// find returns the constraint of the given kind on subject.
func find(t testing.TB, r Result, kind ConstraintKind, subject string) Constraint {
	t.Helper()
	for _, c := range r.Constraints {
		if c.Kind == kind && c.Subject == subject {
			return c
		}
	}
	t.Fatalf("no %s constraint on %s among %v", kind, subject, r.Constraints)
	return Constraint{}
}

// has reports whether the result has a constraint of the kind on subject.
func has(r Result, kind ConstraintKind, subject string) bool {
	for _, c := range r.Constraints {
		if c.Kind == kind && c.Subject == subject {
			return true
		}
	}
	return false
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}
