package config

import (
	"fmt"
	"strings"
)

// PortSet is a set of TCP ports. The zero value is empty.
type PortSet struct {
	bits [65536 / 64]uint64
}

// Add puts p in the set.
func (s *PortSet) Add(p uint16) { s.bits[p/64] |= 1 << (p % 64) }

// Has reports whether p is in the set.
func (s *PortSet) Has(p uint16) bool { return s.bits[p/64]&(1<<(p%64)) != 0 }

// Ports lists the members in ascending order.
func (s *PortSet) Ports() []uint16 {
	var out []uint16
	for i := range 65536 {
		if s.Has(uint16(i)) {
			out = append(out, uint16(i))
		}
	}
	return out
}

// ParsePortSet parses a comma-separated list of ports and inclusive ranges,
// as in "25,443,8000-8100". Blank input is the empty set.
func ParsePortSet(s string) (PortSet, error) {
	var set PortSet
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := parsePort(strings.TrimSpace(lo))
		if err != nil {
			return PortSet{}, fmt.Errorf("item %q: %w", item, err)
		}
		b := a
		if isRange {
			if b, err = parsePort(strings.TrimSpace(hi)); err != nil {
				return PortSet{}, fmt.Errorf("item %q: %w", item, err)
			}
			if b < a {
				return PortSet{}, fmt.Errorf("item %q: range end is below its start", item)
			}
		}
		for p := uint32(a); p <= uint32(b); p++ {
			set.Add(uint16(p))
		}
	}
	return set, nil
}
