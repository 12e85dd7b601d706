package conflist

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// extensions are the file extensions container runtimes (containerd via
// go-cni, CRI-O via ocicni) load from the CNI conf dir.
func extensions() []string { return []string{".conf", ".conflist", ".json"} }

// ErrNoConfig means the conf dir holds no network config yet.
var ErrNoConfig = errors.New("no CNI network config")

// InvalidError is a first config file that does not load. containerd
// (go-cni) then fails the whole load and CRI-O (ocicni) skips to the next
// file; we refuse to pick the next file: the broken one is usually the
// primary CNI's own config caught mid-change or broken by hand, and
// patching another file would mean meshed pods start without redirection
// once it is fixed.
type InvalidError struct {
	Path string
	Err  error
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("CNI config %s is invalid (fix or remove it): %v", e.Path, e.Err)
}

func (e *InvalidError) Unwrap() error { return e.Err }

// IsList reports whether the runtime reads path as a conflist rather than
// as a single-plugin config.
func IsList(path string) bool { return strings.HasSuffix(path, ".conflist") }

// IsCandidate reports whether a file name is one the runtime considers.
func IsCandidate(name string) bool {
	for _, ext := range extensions() {
		if filepath.Ext(name) == ext {
			return true
		}
	}
	return false
}

// Primary returns the path of the config the runtime uses: the lexically
// first file in dir with a config extension, the way go-cni and ocicni
// order them, loaded with libcni as they load it. If it does not load the
// error is an *InvalidError; an empty or missing dir is ErrNoConfig.
func Primary(dir string) (string, error) {
	files, err := libcni.ConfFiles(dir, extensions())
	if err != nil {
		return "", fmt.Errorf("listing CNI configs in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("%w in %s", ErrNoConfig, dir)
	}
	sort.Strings(files)
	if err := load(files[0]); err != nil {
		return "", &InvalidError{Path: files[0], Err: err}
	}
	return files[0], nil
}

func load(path string) error {
	if IsList(path) {
		list, err := libcni.ConfListFromFile(path)
		if err != nil {
			return err
		}
		if len(list.Plugins) == 0 {
			return errors.New("no plugins in list")
		}
		return nil
	}
	conf, err := libcni.ConfFromFile(path)
	if err != nil {
		return err
	}
	if conf.Network.Type == "" {
		return errors.New("missing 'type'")
	}
	return nil
}
