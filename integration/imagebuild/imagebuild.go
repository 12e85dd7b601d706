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

// Config describes one image.
type Config struct {
	Tag        string
	Output     string
	Files      []File
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
	for _, f := range c.Files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("image path %q must be absolute", f.Path)
		}
	}
	return nil
}

// epoch stamps every layer entry so identical inputs give identical images.
var epoch = time.Unix(0, 0)

// Write builds the image and writes it to c.Output atomically.
func Write(c Config) error {
	layerTar, err := layer(c.Files)
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
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
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

// layer returns one tar stream holding every file, with parent directories
// and a world-writable /tmp.
func layer(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"tmp": true}
	for _, f := range files {
		for d := path.Dir(strings.TrimPrefix(f.Path, "/")); d != "."; d = path.Dir(d) {
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
