package optin

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		for _, m := range []struct {
			name string
			mode Mode
		}{{"inject", Inject}, {"uninject", Uninject}} {
			name := strings.TrimSuffix(filepath.Base(in), ".yaml") + "." + m.name
			t.Run(name, func(t *testing.T) {
				f, err := os.Open(in)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				var out bytes.Buffer
				if err := Rewrite(f, &out, m.mode); err != nil {
					t.Fatal(err)
				}
				golden := filepath.Join("testdata", name+".golden")
				if *update {
					if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (go test -update creates it)", err)
				}
				if !bytes.Equal(out.Bytes(), want) {
					t.Errorf("output differs from %s (go test -update rewrites it); got:\n%s", golden, out.Bytes())
				}
			})
		}
	}
}

// rewrite runs Rewrite on a string.
func rewrite(t *testing.T, in string, mode Mode) string {
	t.Helper()
	var out bytes.Buffer
	if err := Rewrite(strings.NewReader(in), &out, mode); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestSemantics checks the outcome on decoded objects, independent of
// formatting: where the opt-in goes for each kind, and that uninject
// undoes inject.
func TestSemantics(t *testing.T) {
	in, err := os.ReadFile("testdata/kinds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(rewrite(t, string(in), Inject), "\n---\n")
	if len(docs) != 7 {
		t.Fatalf("got %d documents, want 7 (the two empty ones dropped)", len(docs))
	}
	type meta struct {
		Labels      map[string]string
		Annotations map[string]string
	}
	var ns struct{ Metadata meta }
	if err := yaml.Unmarshal([]byte(docs[0]), &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Metadata.Labels[Key] != Enabled || ns.Metadata.Labels["team"] != "payments" || ns.Metadata.Annotations[Key] != "" {
		t.Errorf("namespace: want label %s=enabled next to team, no annotation; got %+v", Key, ns.Metadata)
	}
	var cron struct {
		Spec struct {
			JobTemplate struct {
				Spec struct{ Template struct{ Metadata meta } }
			}
		}
	}
	if err := yaml.Unmarshal([]byte(docs[3]), &cron); err != nil {
		t.Fatal(err)
	}
	if m := cron.Spec.JobTemplate.Spec.Template.Metadata; m.Annotations[Key] != Enabled || m.Labels[Key] != Enabled {
		t.Errorf("CronJob pod template: %+v", m)
	}
	if strings.Contains(docs[1], Key) || strings.Contains(docs[6], Key+": enabled\n") {
		t.Errorf("a Service or ConfigMap was changed:\n%s\n%s", docs[1], docs[6])
	}
	// Uninject undoes inject for input without the opt-in.
	for _, f := range []string{"testdata/deployment.yaml", "testdata/list.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		once := rewrite(t, string(b), Uninject)
		back := rewrite(t, rewrite(t, string(b), Inject), Uninject)
		if back != once {
			t.Errorf("%s: uninject(inject(x)) != uninject(x):\n%s\nvs\n%s", f, back, once)
		}
		if again := rewrite(t, rewrite(t, string(b), Inject), Inject); again != rewrite(t, string(b), Inject) {
			t.Errorf("%s: inject is not idempotent", f)
		}
	}
}

func TestBadInput(t *testing.T) {
	good := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n"
	for name, tc := range map[string]struct{ in, want string }{
		"broken YAML in the third document": {good + "---\n" + good + "---\nkind: Pod\nmetadata: [unclosed\n", "document 3 is not valid YAML"},
		"a scalar document":                 {good + "---\njust some text\n", "document 2: not a Kubernetes object"},
		"no kind":                           {"apiVersion: v1\nmetadata: {name: a}\n", "document 1: not a Kubernetes object: no kind"},
		"metadata not a mapping":            {"kind: Pod\nmetadata: [a]\n", "document 1: Pod: metadata: metadata is not a mapping"},
		"List items not a list":             {"kind: List\nitems: {a: b}\n", "document 1: List: items is not a list"},
		"bad List item":                     {"kind: List\nitems:\n- kind: Pod\n- 42\n", "document 1: List item 2: not a Kubernetes object"},
		"annotations not a mapping":         {"kind: Pod\nmetadata:\n  annotations: [x]\n", "document 1: Pod: annotations is not a mapping"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := Rewrite(strings.NewReader(tc.in), &out, Inject)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote output despite the error:\n%s", out.String())
			}
		})
	}
}
