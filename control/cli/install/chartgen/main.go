// Command chartgen writes the generated files of the Helm charts in
// deploy/charts (templates, values.yaml, values.schema.json) from deploy/
// and control/cli/install: `make charts`. Files it no longer generates
// are removed from the charts' templates/.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/deploy"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chartgen DEPLOY_CHARTS_DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	files, err := install.Renderer{Manifests: deploy.Manifests}.Charts()
	if err != nil {
		return err
	}
	stale, err := filepath.Glob(filepath.Join(dir, "*", "templates", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range stale {
		rel, _ := filepath.Rel(dir, f)
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for p, b := range files {
		f := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
