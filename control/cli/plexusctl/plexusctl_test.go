package plexusctl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runMain runs Main and returns its exit code, stdout and stderr.
func runMain(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut})
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	missingKubeconfig := filepath.Join(dir, "nope")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, ExitUsage, "Usage:\n  plexusctl [flags]\n  plexusctl [command]"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, `plexusctl: unknown command "frobnicate" for "plexusctl" (see plexusctl --help)`},
		{"help", []string{"-h"}, ExitOK, "Usage:\n  plexusctl [flags]"},
		{"help on a command", []string{"stat", "--help"}, ExitOK, "Usage:\n  plexusctl stat (ns|deploy|pod)[/NAME] [NAME] [flags]"},
		{"install --crds", []string{"install", "--crds", "--skip-gateway-api-crds"}, ExitOK, ""},
		{"install without a cluster", []string{"install", "--crds", "--kubeconfig=" + missingKubeconfig}, ExitOK, "could not read the installed Gateway API CRDs (kubeconfig: "},
		{"install unknown flag", []string{"install", "--bogus"}, ExitUsage, "plexusctl install: unknown flag: --bogus (see plexusctl install --help)"},
		{"install bad trust domain", []string{"install", "--trust-domain=Not_A_Domain"}, ExitUsage, "trust domain"},
		{"install stray argument", []string{"install", "extra"}, ExitUsage, "unexpected arguments [extra]"},
		{"stat unknown resource", []string{"stat", "svc"}, ExitUsage, `unknown kind "svc": want ns, deploy or po`},
		{"stat no resource", []string{"stat"}, ExitUsage, "want stat (ns|deploy|pod) [NAME], or KIND/NAME"},
		{"stat zero window", []string{"stat", "deploy", "--window=0"}, ExitUsage, "window 0s: want between 100ms and 10m"},
		{"single-dash long flag", []string{"stat", "deploy", "-namespace", "shop"}, ExitUsage, "plexusctl: -namespace: long flags take two dashes: --namespace"},
		{"single-dash long flag with value", []string{"-kubeconfig=x", "stat", "deploy"}, ExitUsage, "-kubeconfig=x: long flags take two dashes: --kubeconfig=x"},
		{"unknown command suggests", []string{"sta"}, ExitUsage, `plexusctl: unknown command "sta" for "plexusctl" Did you mean this? stat (see plexusctl --help)`},
		{"stat bad flag", []string{"stat", "deploy", "--windw=2s"}, ExitUsage, "plexusctl stat: unknown flag: --windw (see plexusctl stat --help)"},
		{"stat bad output", []string{"stat", "pod", "-o", "xml"}, ExitUsage, `unknown output format "xml"`},
		{"stat no kubeconfig", []string{"--kubeconfig", missingKubeconfig, "stat", "pod"}, ExitFail, "kubeconfig"},
		{"check no kubeconfig", []string{"check", "--kubeconfig=" + missingKubeconfig}, ExitFail, "kubeconfig"},
		{"uninstall negative timeout", []string{"uninstall", "--timeout=-1s"}, ExitUsage, "timeout -1s is negative"},
		{"uninstall bad dir", []string{"uninstall", "--cni-bin-dir=bin"}, ExitUsage, "CNI bin dir"},
		{"uninstall no kubeconfig", []string{"uninstall", "--kubeconfig=" + missingKubeconfig}, ExitFail, "kubeconfig"},
		{"help lists uninstall", []string{"-h"}, ExitOK, "uninstall    remove plexus-cni from every node"},
		{"help lists routes", []string{"-h"}, ExitOK, "routes       per-route traffic"},
		{"routes no object", []string{"routes", "deploy"}, ExitUsage, "want routes (ns|deploy|pod)/NAME"},
		{"routes service", []string{"routes", "svc/web"}, ExitUsage, `unknown kind "svc": want ns, deploy or po`},
		{"routes bad output", []string{"routes", "deploy/web", "-o", "xml"}, ExitUsage, `unknown output format "xml"`},
		{"routes no kubeconfig", []string{"routes", "deploy", "web", "--kubeconfig", missingKubeconfig}, ExitFail, "kubeconfig"},
		{"help lists authz", []string{"-h"}, ExitOK, "authz        inbound policy of each port of a workload"},
		{"authz no object", []string{"authz", "deploy"}, ExitUsage, "want authz (deploy|sts|ds|pod)/NAME"},
		{"authz service", []string{"authz", "svc/web"}, ExitUsage, `unknown kind "svc"`},
		{"authz bad --from", []string{"authz", "deploy/web", "--from", "user/x"}, ExitUsage, `--from "user/x": want sa/NAME`},
		{"authz --from-namespace alone", []string{"authz", "deploy/web", "--from-namespace", "other"}, ExitUsage, "--from-namespace needs --from"},
		{"authz bad --from-ip", []string{"authz", "deploy/web", "--from", "sa/a", "--from-ip", "10.0.0"}, ExitUsage, "--from-ip"},
		{"authz --from-ip alone", []string{"authz", "deploy/web", "--from-ip", "10.0.0.1", "--kubeconfig", missingKubeconfig}, ExitUsage, "--from-ip needs --from"},
		{"authz bad port", []string{"authz", "sts/db", "--port", "70000"}, ExitUsage, "--port 70000"},
		{"authz bad output", []string{"authz", "ds/agent", "-o", "xml"}, ExitUsage, `unknown output format "xml"`},
		{"authz no kubeconfig", []string{"authz", "pod", "web-1", "--from", "sa/a", "--kubeconfig", missingKubeconfig}, ExitFail, "kubeconfig"},
		{"profile without --template", []string{"profile", "web"}, ExitUsage, "want profile --template SERVICE"},
		{"profile bad service name", []string{"profile", "--template", "Web", "-n", "shop"}, ExitFail, "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, "", tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if code == ExitUsage && strings.Count(strings.TrimSpace(stderr), "\n") > 0 && !strings.Contains(stderr, "Usage:") {
				t.Errorf("a usage error of more than one line: %q", stderr)
			}
		})
	}
}

func TestInjectFilesAndStdin(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(a, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runMain(t, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n", "inject", a, "-")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	docs := strings.Split(out, "---\n")
	if len(docs) != 2 || !strings.Contains(docs[0], "name: a") || !strings.Contains(docs[1], "name: shop") || strings.Count(out, "plexus.dev/inject: enabled") != 3 {
		t.Errorf("output:\n%s", out)
	}
	code, out, _ = runMain(t, out, "uninject")
	if code != ExitOK || strings.Contains(out, "plexus.dev/inject") {
		t.Errorf("uninject from stdin: exit %d\n%s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: Pod\n---\nkind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runMain(t, "", "inject", a, bad)
	if code != ExitFail || out != "" || !strings.Contains(stderr, bad+": document 2") {
		t.Errorf("garbage: exit %d, stdout %q, stderr %q; want 1, nothing, an error naming the file and document 2", code, out, stderr)
	}
}

func TestInstallGatewayAPICRDs(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, out, _ := runMain(t, "", "install", "--crds", "--kubeconfig", missing)
	if !strings.Contains(out, "name: httproutes.gateway.networking.k8s.io") || !strings.Contains(out, "name: grpcroutes.gateway.networking.k8s.io") {
		t.Error("with no cluster to ask, install --crds leaves out the Gateway API CRDs")
	}
	code, out, stderr := runMain(t, "", "install", "--crds", "--skip-gateway-api-crds", "--kubeconfig", missing)
	if code != ExitOK || strings.Contains(out, "routes.gateway.networking.k8s.io") || stderr != "" {
		t.Errorf("--skip-gateway-api-crds: exit %d, stderr %q, Gateway API CRDs in the output: %v", code, stderr, strings.Contains(out, "routes.gateway.networking.k8s.io"))
	}
}

func TestProfileTemplate(t *testing.T) {
	code, out, stderr := runMain(t, "", "profile", "--template", "books", "-n", "shop", "--cluster-domain", "k8s.example.org")
	if code != ExitOK || !strings.Contains(out, "name: books.shop.svc.k8s.example.org\n  namespace: shop\n") {
		t.Errorf("exit %d, stderr %q, output:\n%s", code, stderr, out)
	}
	// Without -n or a kubeconfig context: the default namespace.
	code, out, _ = runMain(t, "", "--kubeconfig", filepath.Join(t.TempDir(), "nope"), "profile", "web", "--template")
	if code != ExitOK || !strings.Contains(out, "name: web.default.svc.cluster.local\n") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}
