package capacity

import (
	"fmt"
	"strings"
)

// maxBottleneckGroups bounds how many distinct reasons a bottleneck lists;
// a preview line must stay readable when many limits tie.
const maxBottleneckGroups = 3

// describeBinding explains the binding constraints in words. Hosts and
// links that bind for the same reason are named together, e.g.
// "CPU of pc02, pc03 and 2 more (in 1, out 1, disk)".
func describeBinding(binding []Constraint) string {
	type group struct {
		first    Constraint
		subjects []string
	}
	var groups []*group
	byKey := make(map[groupKey]*group)
	for _, c := range binding {
		k := keyOf(c)
		g, ok := byKey[k]
		if !ok {
			g = &group{first: c}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.subjects = append(g.subjects, c.Subject)
	}
	var parts []string
	for i, g := range groups {
		if i == maxBottleneckGroups {
			parts = append(parts, fmt.Sprintf("and %d more kinds of limit", len(groups)-i))
			break
		}
		parts = append(parts, describeGroup(g.first, g.subjects))
	}
	return strings.Join(parts, "; ")
}

// groupKey is what constraints must share to be described together.
type groupKey struct {
	kind    ConstraintKind
	flow    Flow
	streams int
}

func keyOf(c Constraint) groupKey {
	switch c.Kind {
	case LinkLimit, BackplaneLimit, MachineCPULimit, MachineMemoryLimit, MachineDiskLimit, SourceRateLimit:
		return groupKey{kind: c.Kind, streams: c.Streams}
	case DiskLimit, DecompressLimit, CompressLimit:
		// These limit the same way whatever else the host does.
		return groupKey{kind: c.Kind, flow: Flow{Source: c.Flow.Source}}
	default:
		return groupKey{kind: c.Kind, flow: c.Flow}
	}
}

// describeGroup words constraint c as it applies to every subject.
func describeGroup(c Constraint, subjects []string) string {
	names := listNames(subjects)
	many := len(subjects) > 1
	switch c.Kind {
	case LinkLimit:
		switch {
		case !many && c.Streams == 1:
			return fmt.Sprintf("link %s (1 channel)", names)
		case !many:
			return fmt.Sprintf("link %s shared by %d channels", names, c.Streams)
		case c.Streams == 1:
			return fmt.Sprintf("links %s (1 channel each)", names)
		default:
			return fmt.Sprintf("links %s, each shared by %d channels", names, c.Streams)
		}
	case BackplaneLimit:
		if many {
			return fmt.Sprintf("backplanes of %s (%d streams each)", names, c.Streams)
		}
		return fmt.Sprintf("backplane of %s (%d streams)", names, c.Streams)
	case DiskLimit:
		if c.Flow.Source {
			return fmt.Sprintf("disk of %s (image read)", names)
		}
		return fmt.Sprintf("disk of %s", names)
	case DecompressLimit:
		return fmt.Sprintf("decoding thread of %s", names)
	case CompressLimit:
		if c.Cap > 1 {
			return fmt.Sprintf("%.0f compressing threads of %s", c.Cap, names)
		}
		return fmt.Sprintf("compressing thread of %s", names)
	case MachineCPULimit:
		return fmt.Sprintf("CPU of machine %s, shared by %d hosts", names, c.Streams)
	case MachineMemoryLimit:
		return fmt.Sprintf("memory system of machine %s, shared by %d hosts", names, c.Streams)
	case MachineDiskLimit:
		return fmt.Sprintf("disk of machine %s, shared by %d hosts", names, c.Streams)
	case SourceRateLimit:
		return fmt.Sprintf("the rate limit of %s (-max-rate %.1f MB/s)", names, c.Cap/MB)
	}
	return fmt.Sprintf("%s of %s (%s)", resourceWords(c.Kind), names, c.Flow)
}

// resourceWords names a host resource for people.
func resourceWords(k ConstraintKind) string {
	switch k {
	case SwitchingLimit:
		return "switching capacity"
	case IOBusLimit:
		return "I/O bus"
	case MemoryLimit:
		return "memory system"
	case CPULimit:
		return "CPU"
	default:
		return string(k)
	}
}

// listNames joins names as "a", "a and b", "a, b and 3 more".
func listNames(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	case 2:
		return names[0] + " and " + names[1]
	case 3:
		return names[0] + ", " + names[1] + " and " + names[2]
	default:
		return fmt.Sprintf("%s, %s and %d more", names[0], names[1], len(names)-2)
	}
}
