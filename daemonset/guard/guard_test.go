package guard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/daemonset/conflist"
)

const entry = `{"type":"plexus-cni","kubeconfig":"/var/lib/plexus/plexus-cni.kubeconfig"}`

const flannel = `{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

type counts struct {
	patched  int
	repatch  int
	fights   int
	failures []error
	ready    bool
	reason   string
}

type recorder struct {
	mu sync.Mutex
	c  counts
}

func (r *recorder) Patched(_ conflist.Result, repatch bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.patched++
	if repatch {
		r.c.repatch++
	}
}
func (r *recorder) Failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.failures = append(r.c.failures, err)
}
func (r *recorder) Fight(int, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.fights++
}
func (r *recorder) Ready(ok bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.ready, r.c.reason = ok, reason
}
func (r *recorder) snapshot() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.c
	c.failures = append([]error(nil), r.c.failures...)
	return c
}

type fixture struct {
	dir     string
	rec     *recorder
	patches atomic.Int32 // Patch calls
}

// start runs a guard over a fresh conf dir holding files.
func start(t *testing.T, cfg Config, files map[string]string) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{dir: filepath.Join(root, "net.d"), rec: &recorder{}}
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		f.write(t, name, body)
	}
	p := &conflist.Patcher{ConfDir: f.dir, StateDir: filepath.Join(root, "state"), Entry: []byte(entry)}
	cfg.Dir = f.dir
	cfg.Patch = func() (conflist.Result, error) {
		f.patches.Add(1)
		return p.Patch()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, f.rec) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

func (f *fixture) write(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// patchedWithin polls until the primary config ends with plexus-cni and
// returns how long that took, or fails after limit.
func (f *fixture) patchedWithin(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for time.Since(t0) < limit {
		if p, err := conflist.Primary(f.dir); err == nil && conflist.IsList(p) {
			if b, err := os.ReadFile(p); err == nil && conflist.Contains(b) {
				return time.Since(t0)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("primary config in %s not patched within %v", f.dir, limit)
	return 0
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for t0 := time.Now(); time.Since(t0) < limit; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", limit, what)
}

func TestRepatchWithinOneSecond(t *testing.T) {
	f := start(t, Config{}, map[string]string{"10-flannel.conflist": flannel})
	f.patchedWithin(t, time.Second)
	waitFor(t, time.Second, "ready", func() bool { return f.rec.snapshot().ready })

	// The primary CNI rewrites its file in place, then by rename.
	f.write(t, "10-flannel.conflist", flannel)
	if d := f.patchedWithin(t, time.Second); d > time.Second {
		t.Fatalf("re-patch after in-place rewrite took %v", d)
	}
	tmp := filepath.Join(f.dir, ".flannel.tmp")
	if err := os.WriteFile(tmp, []byte(flannel), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, "10-flannel.conflist")); err != nil {
		t.Fatal(err)
	}
	f.patchedWithin(t, time.Second)
	waitFor(t, time.Second, "two re-patches counted", func() bool { return f.rec.snapshot().repatch == 2 })
	if s := f.rec.snapshot(); s.patched != 3 || s.fights != 0 || len(s.failures) != 0 {
		t.Fatalf("recorded %+v, want 1 install + 2 re-patches, no fight, no failure", s)
	}
}

func TestWaitsForPrimaryConfig(t *testing.T) {
	f := start(t, Config{}, nil)
	waitFor(t, time.Second, "not ready, waiting", func() bool {
		s := f.rec.snapshot()
		return !s.ready && s.reason != ""
	})
	time.Sleep(200 * time.Millisecond)
	if n := f.patches.Load(); n != 1 {
		t.Fatalf("%d patch attempts on an empty dir, want 1 (wait for an event)", n)
	}
	f.write(t, "10-bridge.conf", `{"cniVersion":"1.0.0","name":"n","type":"bridge"}`)
	f.patchedWithin(t, time.Second)
	waitFor(t, time.Second, "ready", func() bool { return f.rec.snapshot().ready })
	if _, err := os.Stat(filepath.Join(f.dir, "10-bridge.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the .conf is still there: %v", err)
	}
}

func TestInvalidConfigNoHotLoopThenFixed(t *testing.T) {
	f := start(t, Config{}, map[string]string{"10-flannel.conflist": `{"name": "cbr0", "plugins": [`})
	waitFor(t, time.Second, "a failure", func() bool { return len(f.rec.snapshot().failures) > 0 })
	time.Sleep(time.Second)
	if n := f.patches.Load(); n > 2 {
		t.Fatalf("%d patch attempts in 1s on an unchanged invalid file", n)
	}
	var inv *conflist.InvalidError
	if s := f.rec.snapshot(); s.ready || !errors.As(s.failures[0], &inv) {
		t.Fatalf("recorded %+v, want not ready and an InvalidError", s)
	}
	f.write(t, "10-flannel.conflist", flannel)
	f.patchedWithin(t, time.Second)
}

func TestFightBacksOffAndReports(t *testing.T) {
	cfg := Config{FightThreshold: 3, FightWindow: 10 * time.Second, MaxBackoff: 2 * time.Second}
	f := start(t, cfg, map[string]string{"10-flannel.conflist": flannel})
	f.patchedWithin(t, time.Second)

	// A component that rewrites its config every 20ms for 3s.
	stop := time.Now().Add(3 * time.Second)
	for time.Now().Before(stop) {
		f.write(t, "10-flannel.conflist", flannel)
		time.Sleep(20 * time.Millisecond)
	}
	s := f.rec.snapshot()
	if s.fights == 0 {
		t.Fatalf("no fight reported: %+v", s)
	}
	if s.ready {
		t.Fatal("ready during a fight")
	}
	// Without backoff there would be ~40 writes (one per 70ms); with it:
	// 3 quick ones, then one after 1s and one after 2s.
	if s.patched > 7 {
		t.Fatalf("%d writes in a 3s fight: hot loop", s.patched)
	}
	if n := f.patches.Load(); n > 12 {
		t.Fatalf("%d patch attempts in a 3s fight", n)
	}
	// Once the other side stops, the entry comes back after the backoff.
	f.patchedWithin(t, cfg.MaxBackoff+time.Second)
}

func TestAlreadyPatchedAtStartThenRewriteIsRepatch(t *testing.T) {
	patched, _, err := conflist.PatchList([]byte(flannel), []byte(entry))
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, Config{}, map[string]string{"10-flannel.conflist": string(patched)})
	waitFor(t, time.Second, "ready", func() bool { return f.rec.snapshot().ready })
	if s := f.rec.snapshot(); s.patched != 0 {
		t.Fatalf("already patched file written at start: %+v", s)
	}
	f.write(t, "10-flannel.conflist", flannel)
	f.patchedWithin(t, time.Second)
	waitFor(t, time.Second, "a re-patch", func() bool { s := f.rec.snapshot(); return s.repatch == 1 && s.patched == 1 })
}
