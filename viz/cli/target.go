package vizcli

import (
	"fmt"
	"strings"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// Kind is a kind of Kubernetes object as RBAC and the tap API name it:
// plural, lower case ("deployments").
type Kind string

// Kinds the viz commands take.
const (
	Namespaces   Kind = "namespaces"
	Pods         Kind = "pods"
	Deployments  Kind = "deployments"
	StatefulSets Kind = "statefulsets"
	DaemonSets   Kind = "daemonsets"
	ReplicaSets  Kind = "replicasets"
	Jobs         Kind = "jobs"
	CronJobs     Kind = "cronjobs"
	Services     Kind = "services"
)

// kinds lists every Kind with the names kubectl accepts for it (the
// short one first) and its Kind as objects and metric labels write it.
var kinds = []struct {
	kind   Kind
	names  []string
	object string
}{
	{Namespaces, []string{"ns", "namespace", "namespaces"}, "Namespace"},
	{Pods, []string{"po", "pod", "pods"}, "Pod"},
	{Deployments, []string{"deploy", "deployment", "deployments"}, "Deployment"},
	{StatefulSets, []string{"sts", "statefulset", "statefulsets"}, "StatefulSet"},
	{DaemonSets, []string{"ds", "daemonset", "daemonsets"}, "DaemonSet"},
	{ReplicaSets, []string{"rs", "replicaset", "replicasets"}, "ReplicaSet"},
	{Jobs, []string{"job", "jobs"}, "Job"},
	{CronJobs, []string{"cj", "cronjob", "cronjobs"}, "CronJob"},
	{Services, []string{"svc", "service", "services"}, "Service"},
}

// KindNames is the list of accepted short names, for hints.
const KindNames = "ns, po, deploy, sts, ds, rs, job, cronjob or svc"

// ParseKind accepts kubectl's names of a kind: short, singular or plural,
// in any case.
func ParseKind(s string) (Kind, error) {
	l := strings.ToLower(s)
	for _, k := range kinds {
		for _, n := range k.names {
			if n == l {
				return k.kind, nil
			}
		}
	}
	return "", fmt.Errorf("unknown resource kind %q: want %s", s, KindNames)
}

// Short is the kind's short name ("deploy").
func (k Kind) Short() string {
	for _, e := range kinds {
		if e.kind == k {
			return e.names[0]
		}
	}
	return string(k)
}

// Object is the kind as an object's kind field writes it ("Deployment").
func (k Kind) Object() string {
	for _, e := range kinds {
		if e.kind == k {
			return e.object
		}
	}
	return string(k)
}

// KindOfObject is the Kind of an object's kind field ("Deployment"); ""
// when none.
func KindOfObject(object string) Kind {
	for _, e := range kinds {
		if e.object == object {
			return e.kind
		}
	}
	return ""
}

// ShortName is kubectl's short name of an object kind ("Deployment" →
// "deploy"); a kind not listed, lower-cased.
func ShortName(object string) string {
	if k := KindOfObject(object); k != "" {
		return k.Short()
	}
	return strings.ToLower(object)
}

// Tappable reports whether the tap API serves k.
func (k Kind) Tappable() bool {
	for _, r := range tapapi.Resources {
		if r == string(k) {
			return true
		}
	}
	return false
}

// Target is what kubectl-style arguments name: one object, or every
// object of a kind (Name "").
type Target struct {
	Kind Kind
	Name string
}

func (t Target) String() string {
	if t.Name == "" {
		return t.Kind.Short()
	}
	return t.Kind.Short() + "/" + t.Name
}

// ParseTarget reads kubectl-style arguments: KIND/NAME, KIND NAME, or KIND
// alone (every object of the kind; an error when needName).
func ParseTarget(args []string, needName bool) (Target, error) {
	kind, name := "", ""
	if len(args) == 1 && !strings.Contains(args[0], "/") {
		kind = args[0]
	} else {
		var err error
		if kind, name, err = stat.SplitTarget(args); err != nil {
			return Target{}, err
		}
	}
	k, err := ParseKind(kind)
	if err != nil {
		return Target{}, err
	}
	if name == "" && needName {
		return Target{}, fmt.Errorf("%q names no object: want %s/NAME", kind, kind)
	}
	return Target{Kind: k, Name: name}, nil
}
