package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/plexus-mesh/plexus/daemonset/atomicfile"
)

// stateFile, in the patcher's state dir, records the primary config as it
// was before our last write and what we wrote, so uninstall can restore it
// byte for byte.
const stateFile = "conflist-original.json"

// Patcher keeps the plexus-cni entry at the end of the primary config.
type Patcher struct {
	ConfDir  string // the runtime's CNI conf dir
	StateDir string // root-only dir of the agent, outside ConfDir
	Entry    []byte // our plugin entry, a JSON object with "type": "plexus-cni"
}

// Result says what Patch or Unpatch did.
type Result struct {
	Path    string // the primary config after the call
	Changed bool   // a file was written or removed
	From    string // the file replaced when a .conf became a .conflist
}

// ErrConcurrentChange means the file changed between our read and our
// write; nothing was written and the caller should patch again.
var ErrConcurrentChange = errors.New("concurrent change")

// record names files by their name in ConfDir, never by absolute path: the
// agent in the DaemonSet sees the conf dir under /host, while an uninstall
// on the host or a node-image install sees it elsewhere.
type record struct {
	OriginalName string      `json:"original_name"`
	OriginalMode fs.FileMode `json:"original_mode"`
	Original     []byte      `json:"original"`
	WrittenName  string      `json:"written_name"`
	Written      []byte      `json:"written"`
}

func (p *Patcher) path(name string) string { return filepath.Join(p.ConfDir, name) }

// Patch makes the primary config end with Entry. It writes nothing when
// the config is already patched, and nothing when it is invalid.
func (p *Patcher) Patch() (Result, error) {
	if pluginType(p.Entry) != PluginType {
		return Result{}, fmt.Errorf("our entry must have \"type\": %q", PluginType)
	}
	path, err := Primary(p.ConfDir)
	if err != nil {
		return Result{}, err
	}
	data, mode, err := readFile(path)
	if err != nil {
		return Result{}, err
	}
	res := Result{Path: path}
	var out []byte
	if IsList(path) {
		var changed bool
		if out, changed, err = PatchList(data, p.Entry); err != nil {
			return Result{}, &InvalidError{Path: path, Err: err}
		}
		if !changed {
			return res, nil
		}
	} else {
		if out, err = ConvertConf(data, p.Entry); err != nil {
			return Result{}, &InvalidError{Path: path, Err: err}
		}
		res.From = path
		res.Path = strings.TrimSuffix(path, filepath.Ext(path)) + ".conflist"
	}
	if res.From != "" {
		// Never clobber someone else's .conflist of the same name; ours
		// (from an earlier conversion) is fine to replace.
		if cur, err := os.ReadFile(res.Path); err == nil && !Contains(cur) {
			return Result{}, &InvalidError{Path: path, Err: fmt.Errorf("converting it would overwrite %s", res.Path)}
		}
	}
	prev, err := p.load()
	if err != nil {
		return Result{}, err
	}
	rec := record{OriginalName: filepath.Base(path), OriginalMode: mode, Original: data, WrittenName: filepath.Base(res.Path), Written: out}
	if prev != nil && p.path(prev.WrittenName) == path && bytes.Equal(prev.Written, data) {
		// Replacing our own older entry: the original is still the one
		// from before we first wrote.
		rec.OriginalName, rec.OriginalMode, rec.Original = prev.OriginalName, prev.OriginalMode, prev.Original
	} else if IsList(path) {
		// Someone else's file that already names plexus-cni (an older
		// install whose state is lost): the original is it without us.
		if stripped, changed, err := UnpatchList(data); err == nil && changed {
			rec.Original = stripped
		}
	}
	// The record goes first: after a crash between the two, uninstall sees
	// the file is not what the record says and only removes our entry.
	if err := p.save(rec); err != nil {
		return Result{}, err
	}
	unchanged := func() error {
		cur, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(cur, data) {
			return fmt.Errorf("%w: %s changed while being patched", ErrConcurrentChange, path)
		}
		return nil
	}
	if err := atomicfile.WriteIf(res.Path, out, mode, unchanged); err != nil {
		if prev != nil {
			_ = p.save(*prev) // nothing was written: the old record still holds
		}
		return Result{}, err
	}
	res.Changed = true
	if res.From != "" {
		// The .conf sorts before the .conflist, so it must go or the
		// runtime keeps using it.
		if err := os.Remove(res.From); err != nil {
			return res, fmt.Errorf("removing %s after converting it to %s: %w", res.From, res.Path, err)
		}
		if err := atomicfile.SyncDir(p.ConfDir); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Unpatch undoes Patch. If the primary config is still exactly what Patch
// last wrote, the original bytes, name and mode are restored; otherwise
// (another component rewrote it since) only our entry is removed.
func (p *Patcher) Unpatch() (Result, error) {
	rec, err := p.load()
	if err != nil {
		return Result{}, err
	}
	if rec != nil {
		written, original := p.path(rec.WrittenName), p.path(rec.OriginalName)
		cur, err := os.ReadFile(written)
		if err == nil && bytes.Equal(cur, rec.Written) {
			if err := atomicfile.Write(original, rec.Original, rec.OriginalMode); err != nil {
				return Result{}, err
			}
			if written != original {
				if err := os.Remove(written); err != nil {
					return Result{}, fmt.Errorf("removing %s: %w", written, err)
				}
				if err := atomicfile.SyncDir(p.ConfDir); err != nil {
					return Result{}, err
				}
			}
			return Result{Path: original, Changed: true}, p.forget()
		}
	}
	path, err := Primary(p.ConfDir)
	if errors.Is(err, ErrNoConfig) {
		return Result{}, p.forget()
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Path: path}
	if !IsList(path) {
		return res, p.forget()
	}
	data, mode, err := readFile(path)
	if err != nil {
		return Result{}, err
	}
	out, changed, err := UnpatchList(data)
	if err != nil {
		return Result{}, &InvalidError{Path: path, Err: err}
	}
	if changed {
		if err := atomicfile.Write(path, out, mode); err != nil {
			return Result{}, err
		}
		res.Changed = true
	}
	return res, p.forget()
}

func readFile(path string) ([]byte, fs.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, fmt.Errorf("reading CNI config: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("reading CNI config: %w", err)
	}
	return data, fi.Mode().Perm(), nil
}

func (p *Patcher) save(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding conflist state: %w", err)
	}
	if err := os.MkdirAll(p.StateDir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	return atomicfile.Write(filepath.Join(p.StateDir, stateFile), b, 0o600)
}

func (p *Patcher) load() (*record, error) {
	b, err := os.ReadFile(filepath.Join(p.StateDir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading conflist state: %w", err)
	}
	r := &record{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("decoding conflist state %s: %w", filepath.Join(p.StateDir, stateFile), err)
	}
	return r, nil
}

func (p *Patcher) forget() error {
	err := os.Remove(filepath.Join(p.StateDir, stateFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing conflist state: %w", err)
	}
	return nil
}
