package plexusctl

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
)

// commandPaths lists every command but help, as its words after plexusctl.
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" {
			continue
		}
		p := append(append([]string{}, prefix...), sub.Name())
		out = append(out, p)
		out = append(out, commandPaths(sub, p)...)
	}
	return out
}

// TestHelpGolden: every command answers -h and --help with its help, the
// same for both, on stdout, exit 0.
func TestHelpGolden(t *testing.T) {
	r := root(&command.Globals{}, Env{})
	r.InitDefaultCompletionCmd() // cobra adds it as it runs
	paths := append([][]string{nil}, commandPaths(r, nil)...)
	if len(paths) < 30 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, p := range paths {
		name := strings.Join(append([]string{"plexusctl"}, p...), "_")
		t.Run(name, func(t *testing.T) {
			code, out, stderr := runMain(t, "", append(p, "--help")...)
			if code != ExitOK || stderr != "" {
				t.Fatalf("--help: exit %d, stderr %q", code, stderr)
			}
			if _, short, _ := runMain(t, "", append(p, "-h")...); short != out {
				t.Errorf("-h and --help differ")
			}
			goldentest.Golden(t, filepath.Join("help", name+".golden"), []byte(out))
		})
	}
}

// TestCompletionGolden: the completion scripts, and bash's parses.
func TestCompletionGolden(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			code, out, stderr := runMain(t, "", "completion", shell)
			if code != ExitOK || stderr != "" || !strings.Contains(out, "plexusctl") {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			goldentest.Golden(t, filepath.Join("completion", shell+".golden"), []byte(out))
			if shell == "bash" {
				cmd := exec.Command("bash", "-n")
				cmd.Stdin = strings.NewReader(out)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("bash -n: %v\n%s", err, b)
				}
			}
		})
	}
	// The script completes commands and flags: ask it as bash would.
	code, out, _ := runMain(t, "", "__complete", "sta")
	if code != ExitOK || !strings.Contains(out, "stat\t") {
		t.Errorf("completing \"sta\": exit %d\n%s", code, out)
	}
	code, out, _ = runMain(t, "", "__complete", "stat", "--wi")
	if code != ExitOK || !strings.Contains(out, "--window") {
		t.Errorf("completing \"stat --wi\": exit %d\n%s", code, out)
	}
}

// TestVersionClient: version without a cluster, in each format.
func TestVersionClient(t *testing.T) {
	for _, tc := range []struct {
		args []string
		file string
	}{
		{[]string{"version", "--client", "-o", "json"}, "version-client.json.golden"},
		{[]string{"version", "--client", "-o", "yaml"}, "version-client.yaml.golden"},
		{[]string{"version", "--client"}, "version-client.golden"},
		{[]string{"version", "--client", "--short"}, "version-client-short.golden"},
	} {
		code, out, stderr := runMain(t, "", tc.args...)
		if code != ExitOK || stderr != "" {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, stderr)
		}
		goldentest.Golden(t, tc.file, []byte(out))
	}
	code, _, stderr := runMain(t, "", "version", "--client", "-o", "wide")
	if code != ExitUsage || !strings.Contains(stderr, `unknown output format "wide"`) {
		t.Errorf("-o wide: exit %d, stderr %q", code, stderr)
	}
	code, out, stderr := runMain(t, "", "version", "--kubeconfig", filepath.Join(t.TempDir(), "nope"))
	if code != ExitFail || out != "Client version: dev\n" || !strings.Contains(stderr, "kubeconfig") {
		t.Errorf("without a cluster: exit %d, stdout %q, stderr %q; want the client's version and the error", code, out, stderr)
	}
}

// TestColour: colour on a terminal only, never with NO_COLOR, never on
// /dev/null (a character device, not a terminal) or a pipe.
func TestColour(t *testing.T) {
	noEnv := func(string) string { return "" }
	noColor := func(k string) string {
		if k == "NO_COLOR" {
			return "1"
		}
		return ""
	}
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if !Colour(ptmx, noEnv) {
		t.Error("a terminal: no colour")
	}
	if Colour(ptmx, noColor) {
		t.Error("a terminal with NO_COLOR: colour")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"/dev/null": null, "a pipe": w} {
		if Colour(f, noEnv) {
			t.Errorf("%s: colour", name)
		}
	}
}
