package vizcli

import (
	"fmt"
	"strings"

	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// Kind is a kind of Kubernetes object as RBAC and the tap API name it
// (control/cli/kinds).
type Kind = kinds.Kind

// Kinds the viz commands take.
const (
	Namespaces   = kinds.Namespaces
	Pods         = kinds.Pods
	Deployments  = kinds.Deployments
	StatefulSets = kinds.StatefulSets
	DaemonSets   = kinds.DaemonSets
	ReplicaSets  = kinds.ReplicaSets
	Jobs         = kinds.Jobs
	CronJobs     = kinds.CronJobs
	Services     = kinds.Services
)

// Tappable reports whether the tap API serves k.
func Tappable(k Kind) bool {
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
		if kind, name, err = kinds.SplitTarget(args); err != nil {
			return Target{}, err
		}
	}
	k, err := kinds.Parse(kind)
	if err != nil {
		return Target{}, err
	}
	if name == "" && needName {
		return Target{}, fmt.Errorf("%q names no object: want %s/NAME", kind, kind)
	}
	return Target{Kind: k, Name: name}, nil
}
