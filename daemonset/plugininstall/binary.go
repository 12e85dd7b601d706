// Package plugininstall lays the CNI plugin down on a node: its binary in the CNI
// bin dir and its API credentials in a root-only file outside the conf dir.
package plugininstall

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/plexus-mesh/plexus/daemonset/atomicfile"
)

// PluginBinary is the plugin's file name in the CNI bin dir.
const PluginBinary = "plexus-cni"

// Binary copies the plugin binary src into binDir as plexus-cni, mode
// 0755, atomically. It writes nothing when the installed file already has
// the same content and mode, and reports whether it wrote.
func Binary(src, binDir string) (bool, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return false, fmt.Errorf("reading plugin binary: %w", err)
	}
	if len(data) == 0 {
		return false, fmt.Errorf("plugin binary %s is empty", src)
	}
	if err := writableDir(binDir); err != nil {
		return false, fmt.Errorf("CNI bin dir: %w", err)
	}
	dst := filepath.Join(binDir, PluginBinary)
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, data) {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() == 0o755 {
			return false, nil
		}
	}
	if err := atomicfile.Write(dst, data, 0o755); err != nil {
		return false, fmt.Errorf("installing plugin binary: %w", err)
	}
	return true, nil
}

// RemoveBinary deletes the installed plugin; a missing file is no error.
func RemoveBinary(binDir string) error {
	return removeFile(filepath.Join(binDir, PluginBinary))
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// writableDir checks that dir exists, is a directory and accepts a new
// file, with an error that says which.
func writableDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".plexus-probe-*"+atomicfile.TempSuffix)
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return removeFile(name)
}
