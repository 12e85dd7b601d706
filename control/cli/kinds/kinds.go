// Package kinds reads the kinds of Kubernetes object the CLI's commands
// take, by the names kubectl accepts (short, singular or plural, any
// case), and the kubectl-style arguments that name one object (KIND/NAME
// or KIND NAME). Each command says which kinds it takes.
package kinds

import (
	"fmt"
	"strings"
)

// Kind is a kind of object as RBAC and the tap API name it: plural, lower
// case ("deployments").
type Kind string

// The kinds.
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

// All is every kind, in the order hints list them.
var All = []Kind{Namespaces, Pods, Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs, Services}

// table lists every kind with the names kubectl accepts for it (the
// short one first, then the singular) and its kind as objects and metric
// labels write it.
var table = map[Kind]struct {
	names  []string
	object string
}{
	Namespaces:   {[]string{"ns", "namespace", "namespaces"}, "Namespace"},
	Pods:         {[]string{"po", "pod", "pods"}, "Pod"},
	Deployments:  {[]string{"deploy", "deployment", "deployments"}, "Deployment"},
	StatefulSets: {[]string{"sts", "statefulset", "statefulsets"}, "StatefulSet"},
	DaemonSets:   {[]string{"ds", "daemonset", "daemonsets"}, "DaemonSet"},
	ReplicaSets:  {[]string{"rs", "replicaset", "replicasets"}, "ReplicaSet"},
	Jobs:         {[]string{"job", "job", "jobs"}, "Job"},
	CronJobs:     {[]string{"cj", "cronjob", "cronjobs"}, "CronJob"},
	Services:     {[]string{"svc", "service", "services"}, "Service"},
}

// Parse reads s as one of allowed (every kind when none is given) by
// any name kubectl accepts for it; the error names what is allowed.
func Parse(s string, allowed ...Kind) (Kind, error) {
	if len(allowed) == 0 {
		allowed = All
	}
	l := strings.ToLower(s)
	for _, k := range allowed {
		for _, n := range table[k].names {
			if n == l {
				return k, nil
			}
		}
	}
	return "", fmt.Errorf("unknown kind %q: want %s", s, Hint(allowed...))
}

// Hint lists kinds (every kind when none is given) by their short names
// for a message: "po or deploy".
func Hint(ks ...Kind) string {
	if len(ks) == 0 {
		ks = All
	}
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.Short()
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Short is the kind's short name ("deploy").
func (k Kind) Short() string { return k.name(0) }

// Singular is the kind's singular name ("deployment").
func (k Kind) Singular() string { return k.name(1) }

func (k Kind) name(i int) string {
	if e, ok := table[k]; ok {
		return e.names[i]
	}
	return string(k)
}

// Object is the kind as an object's kind field writes it ("Deployment").
func (k Kind) Object() string {
	if e, ok := table[k]; ok {
		return e.object
	}
	return string(k)
}

// OfObject is the Kind of an object's kind field ("Deployment"); "" when
// none.
func OfObject(object string) Kind {
	for _, k := range All {
		if table[k].object == object {
			return k
		}
	}
	return ""
}

// ShortName is kubectl's short name of an object kind ("Deployment" →
// "deploy"); a kind not listed, lower-cased.
func ShortName(object string) string {
	if k := OfObject(object); k != "" {
		return k.Short()
	}
	return strings.ToLower(object)
}

// ParseTarget reads one object of one of allowed from kubectl-style
// arguments: KIND/NAME or KIND NAME.
func ParseTarget(args []string, allowed ...Kind) (Kind, string, error) {
	kind, name, err := SplitTarget(args)
	if err != nil {
		return "", "", err
	}
	k, err := Parse(kind, allowed...)
	if err != nil {
		return "", "", err
	}
	return k, name, nil
}

// ParseKindOrTarget reads kubectl-style arguments naming every object of
// a kind (KIND) or one (KIND/NAME or KIND NAME); name is "" for every one.
func ParseKindOrTarget(args []string, allowed ...Kind) (Kind, string, error) {
	switch {
	case len(args) == 0:
		return "", "", fmt.Errorf("no kind: want %s", Hint(allowed...))
	case len(args) == 1 && !strings.Contains(args[0], "/"):
		k, err := Parse(args[0], allowed...)
		return k, "", err
	}
	return ParseTarget(args, allowed...)
}

// SplitTarget splits kubectl-style arguments naming one object, KIND/NAME
// or KIND NAME, into its kind (unchecked) and name.
func SplitTarget(args []string) (kind, name string, err error) {
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		kind, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2 && !strings.Contains(args[0], "/"):
		kind, name = args[0], args[1]
	default:
		return "", "", fmt.Errorf("want one object, KIND/NAME or KIND NAME, got %q", strings.Join(args, " "))
	}
	if name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("bad name %q", name)
	}
	return kind, name, nil
}
