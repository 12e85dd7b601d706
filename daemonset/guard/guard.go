// Package guard keeps plexus-cni in the primary CNI config: it patches at
// start, waits for the config if there is none yet, watches the conf dir
// (and the plugin binary) and patches again when another component
// rewrites or removes them, and backs off and reports when it finds itself
// fighting that component.
package guard

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/plexus-mesh/plexus/daemonset/conflist"
)

// Observer hears what the guard does. Calls come from the guard's one
// goroutine and must not block.
type Observer interface {
	// Patched: a write happened; repatch is false for the first one.
	Patched(res conflist.Result, repatch bool)
	// Failed: a patch attempt failed (conflist.ErrNoConfig is not a
	// failure; it is reported as not ready, waiting).
	Failed(err error)
	// Fight: rewrites re-patches within the fight window; the next patch
	// waits backoff.
	Fight(rewrites int, backoff time.Duration)
	// Ready: whether our entry is in place and stable, and why not.
	Ready(ready bool, reason string)
}

// Config tunes the guard. Zero durations take the defaults.
type Config struct {
	Dir   string                          // the CNI conf dir to watch
	Patch func() (conflist.Result, error) // usually (*conflist.Patcher).Patch
	// Binary, if set, is the installed plugin binary: its dir is watched
	// too, and a change to that one file (removal, replacement, a write)
	// schedules a patch, which is expected to put the binary back.
	Binary string

	Debounce       time.Duration // settle time after a change (default 50ms)
	Resync         time.Duration // patch this often regardless (default 30s)
	FightWindow    time.Duration // rewrites counted over this (default 1m)
	FightThreshold int           // this many re-patches in the window is a fight (default 3)
	MaxBackoff     time.Duration // longest wait between patches in a fight (default 5m)
}

// Validate checks the required fields and fills in defaults.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("guard: conf dir is empty")
	}
	if c.Patch == nil {
		return errors.New("guard: no patch function")
	}
	if c.Binary != "" && !filepath.IsAbs(c.Binary) {
		return fmt.Errorf("guard: plugin binary %q is not an absolute path", c.Binary)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Debounce, 50*time.Millisecond)
	def(&c.Resync, 30*time.Second)
	def(&c.FightWindow, time.Minute)
	def(&c.MaxBackoff, 5*time.Minute)
	if c.FightThreshold <= 0 {
		c.FightThreshold = 3
	}
	return nil
}

// state is the guard's loop state; only Run's goroutine touches it.
type state struct {
	cfg       Config
	obs       Observer
	installed bool        // a patch attempt has succeeded in this run
	rewrites  []time.Time // re-patches within the fight window
	backoff   time.Duration
	notBefore time.Time
	errWait   time.Duration
}

// Run guards until ctx ends. It returns an error only if the dir cannot be
// watched.
func Run(ctx context.Context, cfg Config, obs Observer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("guard: creating watcher: %w", err)
	}
	defer w.Close()
	if err := w.Add(cfg.Dir); err != nil {
		return fmt.Errorf("guard: watching %s: %w", cfg.Dir, err)
	}
	bin := binWatch{w: w, path: cfg.Binary}
	if err := bin.add(); err != nil {
		return err
	}
	s := &state{cfg: cfg, obs: obs}
	timer := time.NewTimer(0) // patch at once
	defer timer.Stop()
	resync := time.NewTicker(cfg.Resync)
	defer resync.Stop()
	due := time.Now()
	// schedule moves the next patch earlier, never later, so a component
	// writing without pause cannot starve the guard.
	schedule := func(d time.Duration) {
		at := time.Now().Add(d)
		if !due.IsZero() && !at.Before(due) {
			return
		}
		due = at
		timer.Reset(d)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("guard: watcher closed")
			}
			if bin.affected(ev) || conflist.IsCandidate(filepath.Base(ev.Name)) {
				schedule(s.delay(time.Now()))
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("guard: watcher closed")
			}
			// Events may have been lost (queue overflow): look again.
			obs.Failed(fmt.Errorf("guard: watching %s: %w", cfg.Dir, err))
			schedule(s.delay(time.Now()))
		case <-resync.C:
			schedule(s.delay(time.Now()))
		case <-timer.C:
			due = time.Time{}
			now := time.Now()
			if now.Before(s.notBefore) {
				schedule(s.notBefore.Sub(now))
				continue
			}
			if retry := s.patch(now); retry > 0 {
				schedule(retry)
			}
			// A bin dir that went is watched again once it is back; until
			// then the resync and the patch retries cover it.
			_ = bin.add()
		}
	}
}

// delay is how long to wait before patching after a change seen at now.
func (s *state) delay(now time.Time) time.Duration {
	d := s.cfg.Debounce
	if wait := s.notBefore.Sub(now); wait > d {
		d = wait
	}
	return d
}

// patch runs one attempt and returns when to retry on its own (0: wait
// for the next change or resync).
func (s *state) patch(now time.Time) time.Duration {
	res, err := s.cfg.Patch()
	switch {
	case errors.Is(err, conflist.ErrNoConfig):
		s.obs.Ready(false, fmt.Sprintf("waiting for the primary CNI config in %s", s.cfg.Dir))
		return 0 // its creation is an event
	case errors.Is(err, conflist.ErrConcurrentChange):
		return s.cfg.Debounce // someone is writing; look again shortly
	case err != nil:
		s.obs.Failed(err)
		s.obs.Ready(false, err.Error())
		var inv *conflist.InvalidError
		if errors.As(err, &inv) {
			return 0 // a fix is an event
		}
		// Filesystem trouble: retry, slower each time, up to the resync.
		s.errWait = min(max(2*s.errWait, time.Second), s.cfg.Resync)
		return s.errWait
	}
	s.errWait = 0
	fighting := false
	repatch := s.installed
	s.installed = true
	if res.Changed {
		s.obs.Patched(res, repatch)
		if repatch {
			fighting = s.countRewrite(now)
		}
	}
	s.trim(now)
	if !fighting && len(s.rewrites) < s.cfg.FightThreshold {
		s.backoff, s.notBefore = 0, time.Time{}
	}
	if s.backoff > 0 {
		s.obs.Ready(false, fmt.Sprintf("another component keeps rewriting the primary CNI config (%d times in %v); plexus-cni must run last in the chain: configure that component to chain it, or stop it rewriting", len(s.rewrites), s.cfg.FightWindow))
		return 0
	}
	s.obs.Ready(true, "")
	return 0
}

// countRewrite records a re-patch and reports whether it makes a fight, in
// which case the next patch is pushed back, doubling each time.
func (s *state) countRewrite(now time.Time) bool {
	s.rewrites = append(s.rewrites, now)
	s.trim(now)
	if len(s.rewrites) < s.cfg.FightThreshold {
		return false
	}
	s.backoff = min(max(2*s.backoff, time.Second), s.cfg.MaxBackoff)
	s.notBefore = now.Add(s.backoff)
	s.obs.Fight(len(s.rewrites), s.backoff)
	return true
}

func (s *state) trim(now time.Time) {
	i := 0
	for i < len(s.rewrites) && now.Sub(s.rewrites[i]) > s.cfg.FightWindow {
		i++
	}
	s.rewrites = s.rewrites[i:]
}

// binWatch watches the dir of the plugin binary for events on that one
// file. When the dir itself goes (inotify drops the watch), add puts the
// watch back once the dir exists again.
type binWatch struct {
	w       *fsnotify.Watcher
	path    string // "" when not watching the binary
	watched bool
}

// add watches the binary's dir unless it is already watched.
func (b *binWatch) add() error {
	if b.path == "" || b.watched {
		return nil
	}
	dir := filepath.Dir(b.path)
	if err := b.w.Add(dir); err != nil {
		return fmt.Errorf("guard: watching the plugin binary's dir %s: %w", dir, err)
	}
	b.watched = true
	return nil
}

// affected reports whether ev concerns the binary, and notes a lost watch.
func (b *binWatch) affected(ev fsnotify.Event) bool {
	if b.path == "" {
		return false
	}
	if ev.Name == filepath.Dir(b.path) && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
		b.watched = false
		return true
	}
	return ev.Name == b.path
}
