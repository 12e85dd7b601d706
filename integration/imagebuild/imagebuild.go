// Package imagebuild builds single-layer container images from local files
// and writes them as docker-archive tarballs that `ctr images import` reads.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one local file placed into the image.
type File struct {
	Path   string // absolute path inside the image
	Source string // local file to copy; its mode bits are kept
}

// Symlink is a symbolic link placed into the image, e.g. the names a
// multi-call binary answers to.
type Symlink struct {
	Path   string // absolute path inside the image
	Target string // what the link points to, as ln -s takes it
}

// Config describes one image.
type Config struct {
	Tag        string
	Output     string
	Files      []File
	Symlinks   []Symlink
	Entrypoint []string
	User       string
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if _, err := name.NewTag(c.Tag); err != nil {
		return fmt.Errorf("tag %q: %w", c.Tag, err)
	}
	if c.Output == "" {
		return errors.New("output path is required")
	}
	if len(c.Files) == 0 {
		return errors.New("at least one file is required")
	}
	seen := map[string]bool{}
	for _, f := range c.Files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("image path %q must be absolute", f.Path)
		}
		seen[path.Clean(f.Path)] = true
	}
	for _, l := range c.Symlinks {
		if !path.IsAbs(l.Path) || l.Target == "" {
			return fmt.Errorf("symlink %s -> %q: want an absolute path and a target", l.Path, l.Target)
		}
		if seen[path.Clean(l.Path)] {
			return fmt.Errorf("symlink %s is also a file or another symlink", l.Path)
		}
		seen[path.Clean(l.Path)] = true
	}
	return nil
}

// epoch stamps every layer entry so identical inputs give identical images.
var epoch = time.Unix(0, 0)

// Write builds the image and writes it to c.Output atomically.
func Write(c Config) error {
	layerTar, err := layer(c.Files, c.Symlinks)
	if err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("making layer: %w", err)
	}
	// Config first, then the layer: AppendLayers records its diff ID and
	// history in the config it finds.
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: c.Entrypoint,
			User:       c.User,
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
	})
	if err != nil {
		return fmt.Errorf("setting config: %w", err)
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		return fmt.Errorf("adding layer: %w", err)
	}
	tag, err := name.NewTag(c.Tag)
	if err != nil {
		return err
	}
	tmp := c.Output + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", c.Output, err)
	}
	return os.Rename(tmp, c.Output)
}

// layer returns one tar stream holding every file and symlink, with
// parent directories and a world-writable /tmp.
func layer(files []File, links []Symlink) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"tmp": true}
	paths := make([]string, 0, len(files)+len(links))
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	for _, l := range links {
		paths = append(paths, l.Path)
	}
	for _, p := range paths {
		for d := path.Dir(strings.TrimPrefix(p, "/")); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted)
	for _, d := range sorted {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return nil, err
		}
	}
	for _, l := range links {
		hdr := &tar.Header{
			Typeflag: tar.TypeSymlink,
			Name:     strings.TrimPrefix(l.Path, "/"),
			Linkname: l.Target,
			Mode:     0o777,
			ModTime:  epoch,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addFile(tw *tar.Writer, f File) error {
	data, err := os.ReadFile(f.Source)
	if err != nil {
		return fmt.Errorf("reading %s: %w", f.Source, err)
	}
	info, err := os.Stat(f.Source)
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(f.Path, "/"),
		Mode:     int64(info.Mode().Perm()),
		Size:     int64(len(data)),
		ModTime:  epoch,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}
