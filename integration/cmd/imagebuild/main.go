// Command imagebuild writes a container image as a docker-archive tarball
// from local files, so the local cluster can import our binaries without a
// Docker engine or a registry.
//
//	imagebuild -tag plexus.dev/testapp:dev -o images/testapp.tar \
//	    -file /testapp=bin/testapp -entrypoint /testapp
//
// -symlink DST=TARGET adds a symbolic link (the names of a multi-call
// binary such as xtables-nft-multi).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/plexus-mesh/plexus/integration/imagebuild"
)

// fileList collects repeated -file DST=SRC flags.
type fileList []imagebuild.File

func (f *fileList) String() string { return fmt.Sprint(*f) }

func (f *fileList) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || dst == "" || src == "" {
		return fmt.Errorf("want DST=SRC, got %q", v)
	}
	*f = append(*f, imagebuild.File{Path: dst, Source: src})
	return nil
}

// linkList collects repeated -symlink DST=TARGET flags.
type linkList []imagebuild.Symlink

func (l *linkList) String() string { return fmt.Sprint(*l) }

func (l *linkList) Set(v string) error {
	dst, target, ok := strings.Cut(v, "=")
	if !ok || dst == "" || target == "" {
		return fmt.Errorf("want DST=TARGET, got %q", v)
	}
	*l = append(*l, imagebuild.Symlink{Path: dst, Target: target})
	return nil
}

func main() {
	var cfg imagebuild.Config
	var files fileList
	var links linkList
	var entrypoint, user string
	flag.StringVar(&cfg.Tag, "tag", "", "image reference to tag the image with (required)")
	flag.StringVar(&cfg.Output, "o", "", "docker-archive tarball to write (required)")
	flag.Var(&files, "file", "DST=SRC: put local file SRC at DST in the image (repeatable)")
	flag.Var(&links, "symlink", "DST=TARGET: put a symlink to TARGET at DST in the image (repeatable)")
	flag.StringVar(&entrypoint, "entrypoint", "", "entrypoint, space separated")
	flag.StringVar(&user, "user", "", "user the image runs as, e.g. 65532")
	flag.Parse()
	cfg.Files = files
	cfg.Symlinks = links
	cfg.Entrypoint = strings.Fields(entrypoint)
	cfg.User = user
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(2)
	}
	if err := imagebuild.Write(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}
