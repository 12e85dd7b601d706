package xtables

import (
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
)

// Tools are the runners of one backend for both families.
type Tools struct {
	v4, v6 *Runner
	v6Err  error
}

// Detect finds the binaries of mode. IPv4 tools must exist; missing IPv6
// tools are reported only when IPv6 is used.
func Detect(mode Mode, lockWait time.Duration) (*Tools, error) {
	v4, err := New(Config{Family: rules.IPv4, Mode: mode, LockWait: lockWait})
	if err != nil {
		return nil, err
	}
	v6, v6Err := New(Config{Family: rules.IPv6, Mode: mode, LockWait: lockWait})
	return &Tools{v4: v4, v6: v6, v6Err: v6Err}, nil
}

// For returns the runner of a family.
func (t *Tools) For(fam rules.Family) (*Runner, error) {
	if fam == rules.IPv6 {
		return t.v6, t.v6Err
	}
	return t.v4, nil
}
