// Package xtables finds the iptables-save/iptables-restore binaries of the
// chosen backend (legacy or nft) for one IP family and runs them; callers
// switch into the target network namespace first.
package xtables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	goipt "github.com/coreos/go-iptables/iptables"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
)

// Mode selects the iptables backend.
type Mode string

// Backends: Auto uses the node's default iptables (what the distribution's
// alternatives point at); Legacy and NFT force the iptables-legacy-* or
// iptables-nft-* binaries.
const (
	Auto   Mode = "auto"
	Legacy Mode = "legacy"
	NFT    Mode = "nft"
)

// Validate reports whether m is a known mode ("" counts as Auto).
func (m Mode) Validate() error {
	switch m {
	case "", Auto, Legacy, NFT:
		return nil
	}
	return fmt.Errorf("iptables_mode %q: want auto, legacy or nft", string(m))
}

// Config says how to run the binaries.
type Config struct {
	Family rules.Family
	Mode   Mode
	// LockWait bounds the wait for the xtables lock (legacy backend).
	LockWait time.Duration
}

// Validate checks c.
func (c Config) Validate() error {
	if c.Family != rules.IPv4 && c.Family != rules.IPv6 {
		return fmt.Errorf("unknown IP family %d", int(c.Family))
	}
	if c.LockWait < time.Second {
		return fmt.Errorf("lock wait %v is below one second", c.LockWait)
	}
	return c.Mode.Validate()
}

// Runner runs save and restore for one family and backend.
type Runner struct {
	cfg     Config
	save    string
	restore string
	backend string
}

// New finds the binaries for cfg by a path lookup alone: no process is
// started, so finding them costs an ADD nothing. The version check (go-iptables'
// detection, which runs `iptables --version`) is CheckVersion, run by STATUS
// and by a failed Restore to explain itself.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.base()
	r := &Runner{cfg: cfg}
	var err error
	if r.restore, err = exec.LookPath(base + "-restore"); err != nil {
		return nil, fmt.Errorf("finding %s-restore: %w", base, err)
	}
	if r.save, err = exec.LookPath(base + "-save"); err != nil {
		return nil, fmt.Errorf("finding %s-save: %w", base, err)
	}
	r.backend = detectBackend(r.restore)
	return r, nil
}

// base is the name of the family's iptables command for the backend.
func (c Config) base() string {
	base := "iptables"
	if c.Family == rules.IPv6 {
		base = "ip6tables"
	}
	if c.Mode == Legacy || c.Mode == NFT {
		base += "-" + string(c.Mode)
	}
	return base
}

// CheckVersion detects the family's iptables command with go-iptables (one
// `iptables --version`) and fails unless it is at least 1.6.2, the first
// version whose iptables-restore honours --wait.
func (r *Runner) CheckVersion() error {
	base, proto := r.cfg.base(), goipt.ProtocolIPv4
	if r.cfg.Family == rules.IPv6 {
		proto = goipt.ProtocolIPv6
	}
	ipt, err := goipt.New(goipt.IPFamily(proto), goipt.Path(base))
	if err != nil {
		return fmt.Errorf("detecting %s: %w", base, err)
	}
	if v1, v2, v3 := ipt.GetIptablesVersion(); !versionAtLeast(v1, v2, v3, 1, 6, 2) {
		return fmt.Errorf("%s is version %d.%d.%d; at least 1.6.2 is needed for iptables-restore --wait", base, v1, v2, v3)
	}
	return nil
}

// Backend names the backend in use ("nft", "legacy" or "unknown").
func (r *Runner) Backend() string { return r.backend }

// RestorePath is the restore binary in use.
func (r *Runner) RestorePath() string { return r.restore }

// Save returns `iptables-save -t nat` of the current network namespace.
func (r *Runner) Save(ctx context.Context) (string, error) {
	out, err := r.run(ctx, r.save, "-t", "nat")
	if err != nil {
		return "", err
	}
	return out, nil
}

// Restore feeds script to `iptables-restore --noflush --wait`, which applies
// it as one transaction: either every line takes effect or none does. When
// it fails because the binaries are too old, the error says so.
func (r *Runner) Restore(ctx context.Context, script string) error {
	p, err := r.StartRestore()
	if err != nil {
		return err
	}
	return p.Restore(ctx, script)
}

func (r *Runner) run(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func detectBackend(bin string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		real = bin
	}
	name := filepath.Base(real)
	switch {
	case strings.Contains(name, "nft"):
		return "nft"
	case strings.Contains(name, "legacy"):
		return "legacy"
	}
	return "unknown"
}

func versionAtLeast(a, b, c, x, y, z int) bool {
	if a != x {
		return a > x
	}
	if b != y {
		return b > y
	}
	return c >= z
}
