package guard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/daemonset/conflist"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
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
	dir        string
	bin        string // the watched plugin binary, if any
	rec        *recorder
	patches    atomic.Int32 // Patch calls
	reinstalls atomic.Int32 // binaries put back by Patch
}

// plugin is the content of the fixture's plugin binary.
const plugin = "#!/bin/sh\necho plexus-cni\n"

// start runs a guard over a fresh conf dir holding files. With cfg.Binary
// set to a file name, the guard also watches that binary in a fresh bin
// dir, and each patch first puts it back when it is missing or differs, as
// the agent's does.
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
	if cfg.Binary != "" {
		f.bin = filepath.Join(root, "bin", cfg.Binary)
		cfg.Binary = f.bin
		f.ensureBinary(t)
	}
	p := &conflist.Patcher{ConfDir: f.dir, StateDir: filepath.Join(root, "state"), Entry: []byte(entry)}
	cfg.Dir = f.dir
	cfg.Patch = func() (conflist.Result, error) {
		f.patches.Add(1)
		if f.bin != "" {
			if b, err := os.ReadFile(f.bin); err != nil || string(b) != plugin {
				f.reinstalls.Add(1)
				f.ensureBinary(t)
			}
		}
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

// ensureBinary writes the plugin binary (and its dir) by rename, as
// install.Binary does.
func (f *fixture) ensureBinary(t *testing.T) {
	if err := os.MkdirAll(filepath.Dir(f.bin), 0o755); err != nil {
		t.Error(err)
	}
	tmp := f.bin + ".tmp"
	if err := os.WriteFile(tmp, []byte(plugin), 0o755); err != nil {
		t.Error(err)
	}
	if err := os.Rename(tmp, f.bin); err != nil {
		t.Error(err)
	}
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
	eventually.Within(t, limit, "the primary config in "+f.dir+" patched", func() bool {
		p, err := conflist.Primary(f.dir)
		if err != nil || !conflist.IsList(p) {
			return false
		}
		b, err := os.ReadFile(p)
		return err == nil && conflist.Contains(b)
	})
	return time.Since(t0)
}

// ownWritePatched waits for the patch the guard's own first write of the
// conflist triggers (its change event, a debounce later): the second.
func (f *fixture) ownWritePatched(t *testing.T) {
	t.Helper()
	waitFor(t, time.Second, "the patch the guard's own conflist write triggers", func() bool { return f.patches.Load() >= 2 })
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually.Within(t, limit, what, cond)
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
	// Sleep: a hot loop would have patched again by now; an idle guard has no event.
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
	// Sleep: a hot loop would patch many times in a second; an idle guard has no event.
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
		time.Sleep(20 * time.Millisecond) // Sleep: the rewriting component's pace, on purpose
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

func TestBinaryRemovedOrReplacedWithinOneSecond(t *testing.T) {
	f := start(t, Config{Binary: "plexus-cni"}, map[string]string{"10-flannel.conflist": flannel})
	f.patchedWithin(t, time.Second)
	waitFor(t, time.Second, "ready", func() bool { return f.rec.snapshot().ready })
	f.ownWritePatched(t)
	back := func(what string) {
		t.Helper()
		t0 := time.Now()
		waitFor(t, time.Second, "the binary back after "+what, func() bool {
			b, err := os.ReadFile(f.bin)
			return err == nil && string(b) == plugin
		})
		t.Logf("binary back %v after %s", time.Since(t0), what)
	}

	if err := os.Remove(f.bin); err != nil {
		t.Fatal(err)
	}
	back("removal")
	// Replaced by rename (a CNI installer copying its own binaries).
	tmp := filepath.Join(filepath.Dir(f.bin), ".other")
	os.WriteFile(tmp, []byte("something else"), 0o755)
	if err := os.Rename(tmp, f.bin); err != nil {
		t.Fatal(err)
	}
	back("replacement")
	// Overwritten in place.
	if err := os.WriteFile(f.bin, []byte("truncated"), 0o755); err != nil {
		t.Fatal(err)
	}
	back("overwrite")
	if n := f.reinstalls.Load(); n != 3 {
		t.Errorf("%d reinstalls, want 3", n)
	}

	// Other files in the bin dir are none of the guard's business.
	// Sleep: settle: how many follow-up patches the changes above cause varies; nothing marks the last.
	time.Sleep(200 * time.Millisecond)
	before := f.patches.Load()
	for i := range 20 {
		os.WriteFile(filepath.Join(filepath.Dir(f.bin), fmt.Sprintf("plugin-%d", i)), []byte("x"), 0o755)
	}
	// Sleep: a patch these writes wrongly caused would have run by now; an ignored event leaves no trace.
	time.Sleep(300 * time.Millisecond)
	if n := f.patches.Load() - before; n != 0 {
		t.Errorf("%d patches after writes to other files of the bin dir, want 0", n)
	}
	if s := f.rec.snapshot(); s.patched != 1 || !s.ready || len(s.failures) != 0 {
		t.Errorf("recorded %+v, want the one conflist install, ready, no failure", s)
	}
}

func TestBinaryDirRemovedIsWatchedAgain(t *testing.T) {
	f := start(t, Config{Binary: "plexus-cni"}, map[string]string{"10-flannel.conflist": flannel})
	f.patchedWithin(t, time.Second)
	f.ownWritePatched(t)
	if err := os.RemoveAll(filepath.Dir(f.bin)); err != nil {
		t.Fatal(err)
	}
	// The patch this triggers puts dir and binary back (a real agent can
	// only do that for the binary; the resync keeps trying for the dir).
	waitFor(t, time.Second, "the binary back after its dir was removed", func() bool {
		_, err := os.Stat(f.bin)
		return err == nil
	})
	// And the new dir is watched: the guard watches it again once the
	// patch that put it back returns, before it starts another. A touch of
	// the conflist schedules one; once it starts, the watch is in place.
	n := f.patches.Load()
	now := time.Now()
	if err := os.Chtimes(filepath.Join(f.dir, "10-flannel.conflist"), now, now); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "a patch after the one that put the bin dir back", func() bool { return f.patches.Load() > n })
	if err := os.Remove(f.bin); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the binary back after a removal from the new dir", func() bool {
		_, err := os.Stat(f.bin)
		return err == nil
	})
}

func TestBinaryMustBeAbsolute(t *testing.T) {
	cfg := Config{Dir: "/etc/cni/net.d", Patch: func() (conflist.Result, error) { return conflist.Result{}, nil }, Binary: "bin/plexus-cni"}
	if err := cfg.Validate(); err == nil {
		t.Fatal("relative binary path accepted")
	}
}
