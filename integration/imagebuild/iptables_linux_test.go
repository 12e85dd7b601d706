package imagebuild

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/nsmount"
)

// TestIptablesFilesRunInImage builds an image from what iptables-files.sh
// lists (as the Makefile does for plexus-node), unpacks it, and runs the
// image's iptables-nft-restore and -save from a chroot of it inside a
// fresh network namespace: the binaries, extensions and libraries it
// copied are all the plugin's rules need.
func TestIptablesFilesRunInImage(t *testing.T) {
	nsmount.Root(t)
	if _, err := exec.LookPath("xtables-nft-multi"); err != nil {
		t.Skip("iptables (nft) is not installed")
	}
	out, err := exec.Command("./iptables-files.sh").Output()
	if err != nil {
		t.Fatalf("iptables-files.sh: %v", err)
	}
	cfg := Config{Tag: "plexus.dev/iptables:test", Output: filepath.Join(t.TempDir(), "image.tar")}
	for _, arg := range strings.Fields(string(out)) {
		kind, rest, _ := strings.Cut(arg, "=")
		dst, src, ok := strings.Cut(rest, "=")
		switch {
		case !ok:
			t.Fatalf("malformed argument %q", arg)
		case kind == "-file":
			cfg.Files = append(cfg.Files, File{Path: dst, Source: src})
		case kind == "-symlink":
			cfg.Symlinks = append(cfg.Symlinks, Symlink{Path: dst, Target: src})
		default:
			t.Fatalf("unknown argument %q", arg)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Write(cfg); err != nil {
		t.Fatal(err)
	}
	root := unpack(t, cfg.Output, cfg.Tag)

	// A pod injected today: with the self-call rules (their negation, -o
	// and the jump to our inbound chain must round-trip too).
	c := podcontract.Defaults()
	if c.InboundSource, err = podcontract.ParseInboundSource(podcontract.DefaultInboundSource); err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Build(c, rules.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp/rules"), []byte(rules.RenderCreate(rs)), 0o644); err != nil {
		t.Fatal(err)
	}
	netns := nsmount.New(t, t.TempDir(), "image")
	nsmount.Run(t, netns, "chroot", root, "/usr/sbin/iptables-nft-restore", "--noflush", "--wait", "5", "/tmp/rules")
	saved := nsmount.Run(t, netns, "chroot", root, "/usr/sbin/iptables-nft-save", "-t", "nat")
	st, err := rules.ParseSave(saved)
	if err != nil {
		t.Fatal(err)
	}
	if err := rules.Compare(&rs, st); err != nil {
		t.Errorf("rules applied by the image's iptables: %v\n%s", err, saved)
	}
	for _, tool := range []string{"ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-restore"} {
		if v := nsmount.Run(t, netns, "chroot", root, "/usr/sbin/"+tool, "--version"); !strings.Contains(v, "v1.") {
			t.Errorf("%s --version: %q", tool, v)
		}
	}
}

// unpack extracts the image's file system into a temp dir.
func unpack(t *testing.T, archive, tagName string) string {
	t.Helper()
	tag, err := name.NewTag(tagName)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, filepath.Clean("/"+hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, os.FileMode(hdr.Mode).Perm()|0o700)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, dst)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(hdr.Mode).Perm()); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		}
		if err != nil {
			t.Fatalf("unpacking %s: %v", hdr.Name, err)
		}
	}
}
