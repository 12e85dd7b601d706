// Package atomicfile replaces files so that readers see either the old or
// the new content, never a partial write: temp file in the same directory,
// fsync, rename, fsync of the directory.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// TempSuffix ends every temporary file's name. It is not a CNI config
// extension, so a runtime scanning the conf dir never loads a half-written
// file.
const TempSuffix = ".plexus-tmp"

// Write atomically replaces path with data and gives it mode perm
// (exactly, regardless of the umask).
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteIf(path, data, perm, nil)
}

// WriteIf is Write that calls check, if not nil, after the new content is
// on disk and just before the rename, and gives up if it fails. It narrows
// (it cannot close) the window in which another writer's change is lost.
func WriteIf(path string, data []byte, perm os.FileMode, check func() error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*"+TempSuffix)
	if err != nil {
		return fmt.Errorf("writing %s: creating temp file in %s: %w", path, dir, err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", tmpName, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("setting mode of %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmpName, err)
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmpName, path, err)
	}
	ok = true
	return SyncDir(dir)
}

// SyncDir flushes a directory's entries (renames, removals) to disk.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening dir %s for sync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing dir %s: %w", dir, err)
	}
	return nil
}
