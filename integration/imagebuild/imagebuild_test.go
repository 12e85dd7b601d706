package imagebuild

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWriteRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "app")
	if err := os.WriteFile(src, []byte("#!binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "app.tar")
	cfg := Config{
		Tag:        "plexus.dev/app:test",
		Output:     out,
		Files:      []File{{Path: "/usr/local/bin/app", Source: src}},
		Symlinks:   []Symlink{{Path: "/usr/sbin/app-save", Target: "../local/bin/app"}},
		Entrypoint: []string{"/usr/local/bin/app", "serve"},
		User:       "65532",
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Write(cfg); err != nil {
		t.Fatal(err)
	}

	tag, _ := name.NewTag(cfg.Tag)
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("reading the archive back: %v", err)
	}
	conf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if conf.OS != "linux" || conf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", conf.OS, conf.Architecture)
	}
	if got := conf.Config.Entrypoint; len(got) != 2 || got[0] != "/usr/local/bin/app" || got[1] != "serve" {
		t.Errorf("entrypoint %q", got)
	}
	if conf.Config.User != "65532" {
		t.Errorf("user %q, want 65532", conf.Config.User)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want 1 layer, got %d (%v)", len(layers), err)
	}
	if len(conf.RootFS.DiffIDs) != 1 {
		t.Fatalf("config lists %d diff IDs, want 1", len(conf.RootFS.DiffIDs))
	}

	entries := map[string]*tar.Header{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var body []byte
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = hdr
		if hdr.Name == "usr/local/bin/app" {
			body, _ = io.ReadAll(tr)
		}
	}
	app := entries["usr/local/bin/app"]
	if app == nil {
		t.Fatalf("binary missing from image; entries: %v", entries)
	}
	if app.Mode&0o111 == 0 {
		t.Errorf("binary mode %o is not executable", app.Mode)
	}
	if string(body) != "#!binary\n" {
		t.Errorf("binary content %q", body)
	}
	if tmp := entries["tmp"]; tmp == nil || tmp.Mode&0o1777 != 0o1777 {
		t.Errorf("want a world-writable sticky /tmp, got %+v", tmp)
	}
	if entries["usr/local"] == nil {
		t.Error("parent directory usr/local/ missing")
	}
	if l := entries["usr/sbin/app-save"]; l == nil || l.Typeflag != tar.TypeSymlink || l.Linkname != "../local/bin/app" {
		t.Errorf("symlink usr/sbin/app-save: %+v", l)
	}
	if entries["usr/sbin"] == nil {
		t.Error("the symlink's parent directory usr/sbin/ missing")
	}
}

func TestValidate(t *testing.T) {
	good := Config{Tag: "a/b:c", Output: "x.tar", Files: []File{{Path: "/a", Source: "a"}}}
	for name, mutate := range map[string]func(*Config){
		"bad tag":       func(c *Config) { c.Tag = "UPPER CASE" },
		"no output":     func(c *Config) { c.Output = "" },
		"no files":      func(c *Config) { c.Files = nil },
		"relative path": func(c *Config) { c.Files = []File{{Path: "a", Source: "a"}} },
		"relative link": func(c *Config) { c.Symlinks = []Symlink{{Path: "b", Target: "a"}} },
		"empty target":  func(c *Config) { c.Symlinks = []Symlink{{Path: "/b"}} },
		"link on file":  func(c *Config) { c.Symlinks = []Symlink{{Path: "/a", Target: "b"}} },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("good config rejected: %v", err)
	}
}
