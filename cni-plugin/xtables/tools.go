package xtables

import (
	"fmt"
	"os/exec"
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
)

// Tools are the runners of one backend for both families, detected with a
// single `iptables --version` (the IPv6 binaries of a backend ship with the
// IPv4 ones and share its version).
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
	t := &Tools{v4: v4}
	v6 := &Runner{cfg: Config{Family: rules.IPv6, Mode: mode, LockWait: lockWait}}
	base := "ip6tables"
	if mode == Legacy || mode == NFT {
		base += "-" + string(mode)
	}
	if v6.restore, err = exec.LookPath(base + "-restore"); err == nil {
		v6.save, err = exec.LookPath(base + "-save")
	}
	if err != nil {
		t.v6Err = fmt.Errorf("finding %s tools: %w", base, err)
	} else {
		v6.backend = detectBackend(v6.restore)
		t.v6 = v6
	}
	return t, nil
}

// For returns the runner of a family.
func (t *Tools) For(fam rules.Family) (*Runner, error) {
	if fam == rules.IPv6 {
		return t.v6, t.v6Err
	}
	return t.v4, nil
}
