package capacity

// hostLimits collects the constraints of one host's own resources.
type hostLimits struct {
	dst  []Constraint
	name string
}

// add appends coef·b ≤ cap unless the resource is not modelled.
func (h *hostLimits) add(kind ConstraintKind, flow Flow, coef, cap float64) {
	h.addBehind(kind, flow, coef, 0, cap)
}

// addBehind is add for a CPU of which down, of coef, is the node's work
// behind its buffer (Constraint.Down).
func (h *hostLimits) addBehind(kind ConstraintKind, flow Flow, coef, down, cap float64) {
	if cap <= 0 || coef <= 0 {
		return
	}
	h.dst = append(h.dst, Constraint{Kind: kind, Subject: h.name, Flow: flow, Coef: coef, Cap: cap, Down: min(max(down, 0), coef)})
}

// appendHostLimits appends the constraints of one host's own resources,
// as its node model counts them. out is the number of children the host
// sends to; source tells whether the host is the root of the tree.
func appendHostLimits(dst []Constraint, name string, r Resources, source bool, out int, st stream) ([]Constraint, error) {
	h := hostLimits{dst: dst, name: name}
	var err error
	switch r.Model {
	case ModelBasic:
		basicLimits(&h, r, source, out, st)
	case ModelPaper:
		err = paperLimits(&h, r, source, out, st)
	case ModelDolly:
		err = dollyLimits(&h, r, source, out, st)
	default:
		err = r.validate()
	}
	return h.dst, err
}
