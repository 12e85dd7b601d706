package conflist

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

var update = flag.Bool("update", false, "rewrite golden files")

func entry(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/entry.json")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// setup copies testdata/in/<name> into a fresh conf dir as 10-<name>.
func setup(t *testing.T, name string, mode os.FileMode) (*Patcher, string, []byte) {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata/in", name))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := &Patcher{ConfDir: filepath.Join(root, "net.d"), StateDir: filepath.Join(root, "state"), Entry: entry(t)}
	if err := os.Mkdir(p.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.ConfDir, "10-"+name)
	if err := os.WriteFile(path, in, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return p, path, in
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestPatchGolden(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		mode    os.FileMode
	}{
		{"bridge.conf", "10-bridge.conflist", 0o644},
		{"calico.conflist", "10-calico.conflist", 0o600},
		{"cilium.conflist", "10-cilium.conflist", 0o644},
		{"flannel.conflist", "10-flannel.conflist", 0o640},
		{"unknown-fields.conflist", "10-unknown-fields.conflist", 0o644},
		{"older-plexus.conflist", "10-older-plexus.conflist", 0o644},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, inPath, in := setup(t, tc.in, tc.mode)
			res, err := p.Patch()
			if err != nil {
				t.Fatal(err)
			}
			outPath := filepath.Join(p.ConfDir, tc.out)
			if !res.Changed || res.Path != outPath {
				t.Fatalf("result = %+v, want a write to %s", res, outPath)
			}
			got, err := os.ReadFile(outPath)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata/golden", tc.out)
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("patched %s differs from %s:\n%s", tc.in, golden, got)
			}
			if m := stat(t, outPath).Mode().Perm(); m != tc.mode {
				t.Errorf("mode = %v, want %v", m, tc.mode)
			}
			if names := dirNames(t, p.ConfDir); len(names) != 1 || names[0] != tc.out {
				t.Errorf("conf dir holds %v, want only %s (old .conf removed, no temp files)", names, tc.out)
			}
			// The runtime's view: it is the primary, loads, ends with us.
			if prim, err := Primary(p.ConfDir); err != nil || prim != outPath {
				t.Fatalf("Primary = %q, %v", prim, err)
			}
			list, err := libcni.ConfListFromFile(outPath)
			if err != nil {
				t.Fatal(err)
			}
			last := list.Plugins[len(list.Plugins)-1]
			if last.Network.Type != PluginType || !jsonEqual(last.Bytes, p.Entry) {
				t.Errorf("last plugin = %s, want our entry", last.Bytes)
			}
			if n := strings.Count(string(got), `"plexus-cni"`); n != 1 {
				t.Errorf("%d plexus-cni entries, want 1", n)
			}

			// Patching again writes nothing.
			before := stat(t, outPath)
			if res, err := p.Patch(); err != nil || res.Changed {
				t.Fatalf("second Patch = %+v, %v; want no change", res, err)
			}
			if !os.SameFile(before, stat(t, outPath)) {
				t.Error("second Patch replaced the file")
			}

			// Uninstall restores the original exactly.
			if _, err := p.Unpatch(); err != nil {
				t.Fatal(err)
			}
			back, err := os.ReadFile(inPath)
			if err != nil {
				t.Fatal(err)
			}
			wantBack := in
			if tc.in == "older-plexus.conflist" {
				// No record of the older install: what is restored is the
				// file without any plexus-cni entry.
				if wantBack, _, err = UnpatchList(in); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(back, wantBack) {
				t.Errorf("after Unpatch %s =\n%s\nwant\n%s", inPath, back, wantBack)
			}
			if m := stat(t, inPath).Mode().Perm(); m != tc.mode {
				t.Errorf("restored mode = %v, want %v", m, tc.mode)
			}
			if names := dirNames(t, p.ConfDir); len(names) != 1 || names[0] != filepath.Base(inPath) {
				t.Errorf("conf dir after Unpatch holds %v", names)
			}
		})
	}
}

func TestPatchAlreadyPatchedWritesNothing(t *testing.T) {
	p, path, in := setup(t, "already-patched.conflist", 0o644)
	before := stat(t, path)
	res, err := p.Patch()
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed {
		t.Fatal("Patch reported a change on an already patched file")
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, in) || !os.SameFile(before, stat(t, path)) {
		t.Fatal("already patched file was rewritten")
	}
	if _, err := os.Stat(p.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state written for a no-op: %v", err)
	}
}

func TestPatchInvalidJSONWritesNothing(t *testing.T) {
	p, path, in := setup(t, "invalid.conflist", 0o644)
	before := stat(t, path)
	_, err := p.Patch()
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Path != path || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want an InvalidError naming %s", err, path)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, in) || !os.SameFile(before, stat(t, path)) {
		t.Fatal("invalid file was rewritten")
	}
	if names := dirNames(t, p.ConfDir); len(names) != 1 {
		t.Errorf("conf dir holds %v", names)
	}
}

func TestUnpatchAfterForeignRewriteRemovesOnlyOurEntry(t *testing.T) {
	p, path, _ := setup(t, "flannel.conflist", 0o644)
	if _, err := p.Patch(); err != nil {
		t.Fatal(err)
	}
	// Someone edits the patched file (adds a plugin before ours).
	cur, _ := os.ReadFile(path)
	edited := strings.Replace(string(cur), `"plugins": [`, `"plugins": [{"type":"tuning","sysctl":{"net.core.somaxconn":"512"}},`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Unpatch(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if strings.Contains(string(got), PluginType) || !strings.Contains(string(got), "tuning") || !strings.Contains(string(got), "flannel") {
		t.Fatalf("after Unpatch:\n%s", got)
	}
}

func TestRepatchAfterNewEntryKeepsFirstOriginal(t *testing.T) {
	p, path, in := setup(t, "cilium.conflist", 0o644)
	if _, err := p.Patch(); err != nil {
		t.Fatal(err)
	}
	// An upgrade changes our entry; the record must still hold the file
	// from before the first install.
	p.Entry = []byte(`{"type":"plexus-cni","kubeconfig":"/var/lib/plexus/plexus-cni.kubeconfig","log_level":"debug"}`)
	if res, err := p.Patch(); err != nil || !res.Changed {
		t.Fatalf("Patch with new entry = %+v, %v", res, err)
	}
	if _, err := p.Unpatch(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, in) {
		t.Fatalf("after upgrade + Unpatch:\n%s\nwant\n%s", got, in)
	}
}

func TestPrimaryIsLexicallyFirst(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"20-b.conflist":  `{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"ptp"}]}`,
		"10-a.conf":      `{"cniVersion":"1.0.0","name":"a","type":"bridge"}`,
		"05-notes.txt":   `not a config`,
		"00-x.conf.bak":  `{}`,
		".10-a.conf.tmp": `{}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "00-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Primary(dir)
	if err != nil || got != filepath.Join(dir, "10-a.conf") {
		t.Fatalf("Primary = %q, %v; want 10-a.conf", got, err)
	}
	if _, err := Primary(t.TempDir()); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("empty dir: err = %v, want ErrNoConfig", err)
	}
	if _, err := Primary(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("missing dir: err = %v, want ErrNoConfig", err)
	}
	// A .conf with no type is invalid for the runtime.
	if err := os.WriteFile(filepath.Join(dir, "01-bad.conf"), []byte(`{"name":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var inv *InvalidError
	if _, err := Primary(dir); !errors.As(err, &inv) {
		t.Fatalf("err = %v, want InvalidError", err)
	}
}

func TestConvertNeverClobbersForeignConflist(t *testing.T) {
	p, path, in := setup(t, "bridge.conf", 0o644)
	other := filepath.Join(p.ConfDir, "10-bridge.conflist")
	foreign := `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"ptp"}]}`
	if err := os.WriteFile(other, []byte(foreign), 0o644); err != nil {
		t.Fatal(err)
	}
	var inv *InvalidError
	if _, err := p.Patch(); !errors.As(err, &inv) || !strings.Contains(err.Error(), other) {
		t.Fatalf("err = %v, want a refusal naming %s", err, other)
	}
	if b, _ := os.ReadFile(other); string(b) != foreign {
		t.Fatal("foreign conflist overwritten")
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, in) {
		t.Fatal(".conf changed")
	}
}

func TestJSONFileIsReadAsOnePlugin(t *testing.T) {
	p, path, in := setup(t, "bridge.conf", 0o600)
	jsonPath := strings.TrimSuffix(path, ".conf") + ".json"
	if err := os.Rename(path, jsonPath); err != nil {
		t.Fatal(err)
	}
	res, err := p.Patch()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSuffix(path, ".conf") + ".conflist"
	if res.Path != want || res.From != jsonPath {
		t.Fatalf("result %+v, want %s from %s", res, want, jsonPath)
	}
	if names := dirNames(t, p.ConfDir); len(names) != 1 || names[0] != filepath.Base(want) {
		t.Fatalf("conf dir holds %v", names)
	}
	if _, err := p.Unpatch(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(jsonPath); !bytes.Equal(b, in) {
		t.Fatalf(".json after Unpatch:\n%s", b)
	}
}

func TestRefusedConversionKeepsRecord(t *testing.T) {
	// Patch a .conflist, then a foreign tool drops a .conf that sorts
	// first and whose .conflist name is taken: refused, and uninstall
	// still restores the first file exactly.
	p, path, in := setup(t, "calico.conflist", 0o644)
	if _, err := p.Patch(); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(p.ConfDir, "05-x.conf")
	if err := os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"x","type":"bridge"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.ConfDir, "05-x.conflist"), []byte(`{"cniVersion":"1.0.0","name":"y","plugins":[{"type":"ptp"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Patch(); err == nil {
		t.Fatal("conversion over a foreign .conflist accepted")
	}
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(p.ConfDir, "05-x.conflist")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Unpatch(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, in) {
		t.Fatalf("after Unpatch:\n%s", b)
	}
}

// The DaemonSet sees the conf dir under /host; an uninstall on the host, or
// a node image mounted elsewhere, sees it at another path. The record must
// still restore the original byte for byte.
func TestUnpatchFromAnotherRootRestoresOriginal(t *testing.T) {
	p, path, in := setup(t, "calico.conflist", 0o644)
	if _, err := p.Patch(); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(filepath.Dir(p.ConfDir), "elsewhere")
	if err := os.Rename(p.ConfDir, moved); err != nil {
		t.Fatal(err)
	}
	host := &Patcher{ConfDir: moved, StateDir: p.StateDir, Entry: p.Entry}
	if _, err := host.Unpatch(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(moved, filepath.Base(path)))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(in) {
		t.Fatalf("Unpatch from another root did not restore the original:\n%s", got)
	}
}
