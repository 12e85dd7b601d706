package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
)

// NetnsTables applies, removes and reads our rules inside a pod's network
// namespace. The calling thread switches into the namespace (pkg/ns), and
// the iptables binaries it starts inherit that namespace.
type NetnsTables struct {
	log    *slog.Logger
	detect func() (*xtables.Tools, error)
}

// NewNetnsTables returns tables for the given backend; the binaries are
// detected once, on first use or in the background after Prepare.
func NewNetnsTables(mode xtables.Mode, lockWait time.Duration, log *slog.Logger) *NetnsTables {
	return &NetnsTables{
		log:    log,
		detect: sync.OnceValues(func() (*xtables.Tools, error) { return xtables.Detect(mode, lockWait) }),
	}
}

// Prepare starts detecting the iptables binaries in the background, so the
// probe overlaps with the pod lookup.
func (t *NetnsTables) Prepare() { go func() { _, _ = t.detect() }() }

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
// iptables-restore transaction, the families are applied concurrently (each
// from its own thread in the namespace), and if one fails the others are
// removed again.
func (t *NetnsTables) Apply(ctx context.Context, netns string, sets []rules.RuleSet) error {
	start := time.Now()
	tools, err := t.tools()
	if err != nil {
		return err
	}
	t.log.Debug("iptables tools ready", "wait_ms", ms(time.Since(start)))
	errs := make([]error, len(sets))
	var wg sync.WaitGroup
	for i, rs := range sets {
		wg.Go(func() {
			errs[i] = t.in(netns, func() error {
				r, err := tools.For(rs.Family)
				if err == nil {
					err = t.applyOne(ctx, r, rs)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", rs.Family, err)
				}
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, rs := range sets {
			if errs[i] != nil {
				continue
			}
			rerr := t.in(netns, func() error {
				r, err := tools.For(rs.Family)
				if err == nil {
					err = removeWith(ctx, r)
				}
				return err
			})
			if rerr != nil {
				t.log.Error("rolling back rules after a failed apply", "family", rs.Family.String(), "error", rerr)
			}
		}
		return err
	}
	return nil
}

// applyOne first tries the create-only script, which needs no
// iptables-save and succeeds in a fresh pod; if our chains already exist
// (a repeated ADD) it replaces them based on the saved state.
func (t *NetnsTables) applyOne(ctx context.Context, r *xtables.Runner, rs rules.RuleSet) error {
	script := rules.RenderCreate(rs)
	start := time.Now()
	createErr := r.Restore(ctx, script)
	t.log.Debug("applied rules", "family", rs.Family.String(), "backend", r.Backend(), "restore_ms", ms(time.Since(start)), "error", createErr, "script", script)
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
