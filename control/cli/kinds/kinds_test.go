package kinds

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, s := range []string{"deploy", "Deployment", "DEPLOYMENTS"} {
		if k, err := Parse(s); err != nil || k != Deployments {
			t.Errorf("Parse(%q) = %q, %v", s, k, err)
		}
	}
	if k, err := Parse("cj"); err != nil || k != CronJobs || k.Singular() != "cronjob" || k.Object() != "CronJob" {
		t.Errorf("Parse(cj) = %q (%s, %s), %v", k, k.Singular(), k.Object(), err)
	}
	_, err := Parse("svc", Pods, Deployments)
	if err == nil || err.Error() != `unknown kind "svc": want po or deploy` {
		t.Errorf("a kind not allowed: %v", err)
	}
	if _, err := Parse("nodes"); err == nil || !strings.Contains(err.Error(), "ns, po, deploy, sts, ds, rs, job, cj or svc") {
		t.Errorf("an unknown kind: %v", err)
	}
	if OfObject("StatefulSet") != StatefulSets || ShortName("StatefulSet") != "sts" || ShortName("Node") != "node" {
		t.Error("object kinds are not read back")
	}
}

func TestTargets(t *testing.T) {
	for _, c := range []struct {
		args       []string
		kind       Kind
		name, err  string
		kindOrName bool
	}{
		{args: []string{"deploy/web"}, kind: Deployments, name: "web"},
		{args: []string{"po", "web-1"}, kind: Pods, name: "web-1"},
		{args: []string{"ns"}, kind: Namespaces, kindOrName: true},
		{args: []string{"ns"}, err: "want one object"},
		{args: []string{"deploy/"}, err: `bad name ""`},
		{args: []string{"deploy/a/b"}, err: `bad name "a/b"`},
		{args: []string{"a/b", "c"}, err: "want one object"},
		{args: nil, kindOrName: true, err: "no kind: want"},
	} {
		parse := ParseTarget
		if c.kindOrName {
			parse = ParseKindOrTarget
		}
		k, name, err := parse(c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || k != c.kind || name != c.name {
			t.Errorf("%q = %q, %q, %v; want %q, %q", c.args, k, name, err, c.kind, c.name)
		}
	}
}
