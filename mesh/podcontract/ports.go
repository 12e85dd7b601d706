package podcontract

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of TCP ports; a single port has First == Last.
type PortRange struct {
	First uint16
	Last  uint16
}

// String renders the range as "N" or "N-M", the annotation syntax.
func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// Contains reports whether port lies in the range.
func (r PortRange) Contains(port uint16) bool {
	return port >= r.First && port <= r.Last
}

// ParsePorts parses a comma-separated list of ports and ranges such as
// "25,443,8000-8100". Blanks around items are ignored; an empty string is an
// empty list. Port 0, reversed ranges and anything non-numeric are errors.
func ParsePorts(s string) ([]PortRange, error) {
	var out []PortRange
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		first, last, isRange := strings.Cut(item, "-")
		lo, err := parsePort(first)
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", item, err)
		}
		hi := lo
		if isRange {
			if hi, err = parsePort(last); err != nil {
				return nil, fmt.Errorf("item %q: %w", item, err)
			}
			if hi < lo {
				return nil, fmt.Errorf("item %q: range end %d is below its start %d", item, hi, lo)
			}
		}
		out = append(out, PortRange{First: lo, Last: hi})
	}
	return out, nil
}

// ParsePort parses one TCP port in 1..65535.
func ParsePort(s string) (uint16, error) {
	return parsePort(s)
}

func parsePort(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("port 0 is not allowed")
	}
	return uint16(n), nil
}
