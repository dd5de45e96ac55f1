package capacity

// basicLimits is the paper's basic model (eq. 4): a node with in-degree i,
// out-degree o and a disk write handles i+o+1 streams, each costing the
// same share of its switching capacity: (i+o+1)·b ≤ switching. Like the
// paper, the source is such a node too: the image it reads is its inbound
// stream and the read its disk transfer. Compressed network streams count
// b/c; the basic model knows no cost of decompression.
func basicLimits(h *hostLimits, r Resources, source bool, out int, comp stream) {
	flow := Flow{Source: source, In: 1, Out: out, Disk: true}
	wire := comp.wire()
	h.add(SwitchingLimit, flow, float64(flow.In+flow.Out)*wire+1, r.Switching)
	h.add(DiskLimit, flow, 1, r.Disk)
}
