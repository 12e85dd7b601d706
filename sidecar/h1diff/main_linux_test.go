package h1diff

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/outcomes.md from this run")

// proxyBin is the plexus-proxy binary under test: $PLEXUS_PROXY_BIN, or
// one TestMain builds from this tree. buildErr says why there is none.
var (
	proxyBin string
	buildErr error
)

// defaultParallel replaces -test.parallel's default (GOMAXPROCS) unless
// -parallel is given: the cases spend their time waiting for 2 s read
// deadlines, not computing, and one at a time they would take minutes.
const defaultParallel = "16"

func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", defaultParallel)
	}
	dir := ""
	switch {
	case os.Getenv("PLEXUS_PROXY_BIN") != "":
		proxyBin = os.Getenv("PLEXUS_PROXY_BIN")
	case os.Geteuid() == 0: // without root every test skips; build nothing
		dir, proxyBin, buildErr = buildProxy()
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// buildProxy builds ./sidecar/cmd/plexus-proxy into a temporary directory
// the proxy UID can read.
func buildProxy() (dir, bin string, err error) {
	dir, err = os.MkdirTemp("", "h1diff-")
	if err != nil {
		return "", "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, "", err
	}
	bin = filepath.Join(dir, "plexus-proxy")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/plexus-mesh/plexus/sidecar/cmd/plexus-proxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("building plexus-proxy: %w: %s", err, out)
	}
	return dir, bin, nil
}
