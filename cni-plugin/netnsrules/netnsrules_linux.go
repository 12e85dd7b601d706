// Package netnsrules reads, writes and removes the redirect rules inside a
// pod's network namespace, all-or-nothing per family (cni-plugin/xtables
// runs the tools); the plugin and the node agent's repair apply through it.
package netnsrules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/plexus-mesh/plexus/cni-plugin/addlog"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
)

// LockWait bounds the wait for the xtables lock.
const LockWait = 5 * time.Second

// NetnsTables applies, removes and reads our rules inside a pod's network
// namespace. The calling thread switches into the namespace (pkg/ns), and
// the iptables binaries it starts inherit that namespace.
type NetnsTables struct {
	log    *slog.Logger
	detect func() (*xtables.Tools, error)

	preparing sync.WaitGroup
	netns     string                            // where pending runs
	pending   map[rules.Family]*xtables.Pending // started by Prepare, not yet fed
}

// NewNetnsTables returns tables for the given backend; the binaries are
// detected once, on first use or in the background after Prepare.
func NewNetnsTables(mode xtables.Mode, lockWait time.Duration, log *slog.Logger) *NetnsTables {
	return &NetnsTables{
		log:    log,
		detect: sync.OnceValues(func() (*xtables.Tools, error) { return xtables.Detect(mode, lockWait) }),
	}
}

// Prepare starts, in the background, one iptables-restore per family in
// netns, so that their start overlaps the pod lookup; Apply feeds them.
// Call Release when done. A failure here only costs the head start: Apply
// starts its own processes and reports the error.
func (t *NetnsTables) Prepare(netns string, fams []rules.Family) {
	t.preparing.Go(func() {
		start := time.Now()
		pending := map[rules.Family]*xtables.Pending{}
		tools, err := t.tools()
		if err == nil {
			err = t.in(netns, func() error {
				for _, fam := range fams {
					r, err := tools.For(fam)
					if err != nil {
						return err
					}
					if pending[fam], err = r.StartRestore(); err != nil {
						return err
					}
				}
				return nil
			})
		}
		t.netns, t.pending = netns, pending
		t.log.Debug("started iptables-restore ahead of the rules", "families", len(pending), "start_ms", addlog.Millis(time.Since(start)), "error", err)
	})
}

// Release ends the processes Prepare started that Apply did not feed,
// which leaves the namespace unchanged.
func (t *NetnsTables) Release() {
	t.preparing.Wait()
	for _, p := range t.pending {
		p.Cancel()
	}
	t.pending = nil
}

// takePending returns the process Prepare started for fam in netns, if any.
func (t *NetnsTables) takePending(netns string, fam rules.Family) *xtables.Pending {
	t.preparing.Wait()
	if netns != t.netns {
		return nil
	}
	p := t.pending[fam]
	delete(t.pending, fam)
	return p
}

// ErrNetnsGone is returned when the network namespace no longer exists.
var ErrNetnsGone = errors.New("network namespace is gone")

func (t *NetnsTables) tools() (*xtables.Tools, error) { return t.detect() }

func (t *NetnsTables) in(netns string, fn func() error) error {
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error { return fn() })
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	if errors.As(err, &notExist) || errors.As(err, &notNS) {
		return fmt.Errorf("%s: %w", netns, ErrNetnsGone)
	}
	return err
}

// Apply installs every rule set, all or nothing: each family is one
// iptables-restore transaction, and if one fails the others are removed
// again. The families' processes start together (or were started by
// Prepare) and are then fed one after the other: nft transactions of two
// families in one namespace at once conflict and one is redone, which
// costs more CPU than it saves.
func (t *NetnsTables) Apply(ctx context.Context, netns string, sets []rules.RuleSet) error {
	start := time.Now()
	tools, err := t.tools()
	if err != nil {
		return err
	}
	runners := make([]*xtables.Runner, len(sets))
	pending := make([]*xtables.Pending, len(sets))
	errs := make([]error, len(sets))
	prepared := 0
	for i, rs := range sets {
		if pending[i] = t.takePending(netns, rs.Family); pending[i] != nil {
			prepared++
		}
		runners[i], errs[i] = tools.For(rs.Family)
	}
	t.log.Debug("iptables tools ready", "wait_ms", addlog.Millis(time.Since(start)), "prepared", prepared)
	err = t.in(netns, func() error {
		for i := range sets {
			if pending[i] == nil && errs[i] == nil {
				pending[i], errs[i] = runners[i].StartRestore()
			}
		}
		for i, rs := range sets {
			if errs[i] != nil {
				if pending[i] != nil {
					pending[i].Cancel()
				}
				continue
			}
			errs[i] = t.applyOne(ctx, runners[i], pending[i], rs)
		}
		return nil
	})
	if err != nil {
		for _, p := range pending {
			if p != nil {
				p.Cancel()
			}
		}
		return err
	}
	for i, rs := range sets {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("%s: %w", rs.Family, errs[i])
		}
	}
	if err := errors.Join(errs...); err != nil {
		for i, rs := range sets {
			if errs[i] != nil {
				continue
			}
			rerr := t.in(netns, func() error { return removeWith(ctx, runners[i]) })
			if rerr != nil {
				t.log.Error("rolling back rules after a failed apply", "family", rs.Family.String(), "error", rerr)
			}
		}
		return err
	}
	return nil
}

// applyOne feeds the create-only script, which needs no iptables-save and
// succeeds in a fresh pod, to pending (a started iptables-restore); if our
// chains already exist (a repeated ADD) it replaces them based on the
// saved state.
func (t *NetnsTables) applyOne(ctx context.Context, r *xtables.Runner, pending *xtables.Pending, rs rules.RuleSet) error {
	script := rules.RenderCreate(rs)
	start := time.Now()
	createErr := pending.Restore(ctx, script)
	t.log.Debug("applied rules", "family", rs.Family.String(), "backend", r.Backend(), "restore_ms", addlog.Millis(time.Since(start)), "error", createErr, "script", script)
	if createErr == nil {
		return nil
	}
	st, err := readState(ctx, r)
	if err != nil {
		return fmt.Errorf("applying rules: %w (and reading the table: %w)", createErr, err)
	}
	if st.Empty() {
		return fmt.Errorf("applying rules: %w", createErr)
	}
	t.log.Info("our chains exist already; replacing them", "family", rs.Family.String())
	if err := r.Restore(ctx, rules.RenderApply(rs, st)); err != nil {
		return fmt.Errorf("replacing rules: %w", err)
	}
	return nil
}

// Remove deletes our hooks and chains for both families. IPv6 failures
// (e.g. IPv6 disabled in the pod) are logged, not returned.
func (t *NetnsTables) Remove(ctx context.Context, netns string) error {
	tools, err := t.tools()
	if err != nil {
		return err
	}
	return t.in(netns, func() error {
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			r, err := tools.For(fam)
			if err == nil {
				err = removeWith(ctx, r)
			}
			if err != nil {
				if fam == rules.IPv6 {
					t.log.Warn("could not clean IPv6 rules", "error", err)
					continue
				}
				return fmt.Errorf("%s: %w", fam, err)
			}
		}
		return nil
	})
}

// Current reads our chains and hooks for each family.
func (t *NetnsTables) Current(ctx context.Context, netns string, fams []rules.Family) (map[rules.Family]rules.State, error) {
	tools, err := t.tools()
	if err != nil {
		return nil, err
	}
	out := map[rules.Family]rules.State{}
	err = t.in(netns, func() error {
		for _, fam := range fams {
			r, err := tools.For(fam)
			if err != nil {
				return fmt.Errorf("%s: %w", fam, err)
			}
			st, err := readState(ctx, r)
			if err != nil {
				return fmt.Errorf("%s: %w", fam, err)
			}
			out[fam] = st
		}
		return nil
	})
	return out, err
}

func readState(ctx context.Context, r *xtables.Runner) (rules.State, error) {
	saved, err := r.Save(ctx)
	if err != nil {
		return rules.State{}, err
	}
	return rules.ParseSave(saved)
}

func removeWith(ctx context.Context, r *xtables.Runner) error {
	st, err := readState(ctx, r)
	if err != nil {
		return err
	}
	script := rules.RenderDelete(st)
	if script == "" {
		return nil
	}
	if err := r.Restore(ctx, script); err != nil {
		return fmt.Errorf("removing rules: %w", err)
	}
	return nil
}
