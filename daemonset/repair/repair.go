// Package repair finds meshed pods on the agent's node whose network
// namespace lacks the redirect rules (started before the CNI plugin was in
// place, or after a node reboot) and applies the rules in place or deletes
// the pod, recording an Event on it.
package repair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// Mode says what to do with a pod whose rules are missing or wrong.
type Mode string

// The modes.
const (
	// Apply writes the rules into the pod's namespace (all or nothing) and
	// records a Normal RedirectRepaired Event.
	Apply Mode = "apply"
	// Delete records a Warning RedirectMissing Event and deletes the pod,
	// so that its controller recreates it through the plugin. Pods without
	// a controller are not deleted, only reported.
	Delete Mode = "delete"
	// Off only reports: a log line, a Warning RedirectMissing Event once
	// per pod, plexus_node_repairs_total{action="reported"}.
	Off Mode = "off"
)

// Validate reports whether m is a known mode.
func (m Mode) Validate() error {
	switch m {
	case Apply, Delete, Off:
		return nil
	}
	return fmt.Errorf("repair mode %q: want apply, delete or off", string(m))
}

// Event reasons recorded on pods.
const (
	ReasonRepaired     = "RedirectRepaired"
	ReasonMissing      = "RedirectMissing"
	ReasonRepairFailed = "RedirectRepairFailed"
)

// Config configures the repair of one node's pods.
type Config struct {
	Mode Mode
	// Node is the agent's node; only pods bound to it are checked.
	Node string
	// Resync is how often every pod is checked again without a change
	// (default 60s).
	Resync time.Duration
	// Workers is how many pods are checked at once (default 2).
	Workers int
}

// Validate checks c and fills defaults.
func (c *Config) Validate() error {
	if c.Mode == "" {
		c.Mode = Apply
	}
	if err := c.Mode.Validate(); err != nil {
		return err
	}
	if c.Node == "" {
		return errors.New("repair: node name is empty")
	}
	if c.Resync == 0 {
		c.Resync = time.Minute
	}
	if c.Resync < time.Second {
		return fmt.Errorf("repair resync %v: want at least 1s", c.Resync)
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Workers < 0 {
		return fmt.Errorf("repair workers %d: want at least 1", c.Workers)
	}
	return nil
}

// Tables reads and writes our rules in a network namespace
// (plugin.NetnsTables).
type Tables interface {
	Apply(ctx context.Context, netns string, sets []rules.RuleSet) error
	Current(ctx context.Context, netns string, fams []rules.Family) (map[rules.Family]rules.State, error)
}

// Namespaces finds the network namespace holding a pod's IPs
// (podnetns.Finder).
type Namespaces interface {
	Find(ips []netip.Addr) (string, error)
}

// Deps are what the repair is handed.
type Deps struct {
	Client kubernetes.Interface
	// Factory, if not nil, is the NodeFactory of Config.Node to take the
	// pod informer from (shared with other users); nil: Run builds one.
	Factory informers.SharedInformerFactory
	// Plugin is the plugin's conflist entry as the agent installs it: the
	// same excluded namespaces, ports and skip lists as the plugin.
	Plugin  *netconf.NetConf
	Tables  Tables
	Netns   Namespaces
	Metrics *Metrics
	Log     *slog.Logger
}

// Validate checks every dependency is set.
func (d Deps) Validate() error {
	switch {
	case d.Client == nil:
		return errors.New("repair: no API client")
	case d.Plugin == nil:
		return errors.New("repair: no plugin config")
	case d.Tables == nil:
		return errors.New("repair: no iptables access")
	case d.Netns == nil:
		return errors.New("repair: no network namespace finder")
	case d.Metrics == nil:
		return errors.New("repair: no metrics")
	case d.Log == nil:
		return errors.New("repair: no logger")
	}
	return nil
}

// Outcome is what Sync did with a pod.
type Outcome string

// The outcomes.
const (
	Skipped  Outcome = "skipped"  // not a running meshed pod of this node
	Correct  Outcome = "correct"  // the rules are as they should be
	Applied  Outcome = "applied"  // the rules were applied
	Deleted  Outcome = "deleted"  // the pod was deleted
	Reported Outcome = "reported" // the rules are missing; only reported

	failed Outcome = "failed" // only a metric label: Sync returned an error
)

// Repairer checks and repairs one pod at a time; Run feeds it from an
// informer. It is safe for concurrent use.
type Repairer struct {
	cfg  Config
	deps Deps

	mu sync.Mutex
	// warned holds pods that got a Warning Event, so a pod that stays
	// broken (mode off, a pod without controller, a failing repair) gets
	// one Event, not one per resync.
	warned map[types.UID]bool
}

// New validates cfg and deps and returns a Repairer.
func New(cfg Config, deps Deps) (*Repairer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	return &Repairer{cfg: cfg, deps: deps, warned: map[types.UID]bool{}}, nil
}

// inScope says whether pod is one whose rules can be checked here: a
// running, non-terminating pod of this node, on the pod network, with an IP.
func (r *Repairer) inScope(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == r.cfg.Node && pod.DeletionTimestamp == nil && !pod.Spec.HostNetwork &&
		pod.Status.Phase == corev1.PodRunning && len(meshpod.IPs(pod)) > 0
}

// Sync checks one pod and repairs it according to the mode. An error
// means the check or the repair failed and should be retried.
func (r *Repairer) Sync(ctx context.Context, pod *corev1.Pod) (Outcome, error) {
	if !r.inScope(pod) {
		return Skipped, nil
	}
	pp, err := pluginPod(pod)
	if err != nil {
		return "", err
	}
	d, err := podrules.DecidePod(r.deps.Plugin, pp)
	if err != nil {
		return "", err
	}
	if !d.Mesh {
		return Skipped, nil
	}
	r.deps.Metrics.Checked.Inc()
	ips := meshpod.IPs(pod)
	fams := podrules.Families(ips)
	netns, err := r.deps.Netns.Find(ips)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// The wanted rules are built once, for the comparison before and
	// after applying them.
	sets, err := podrules.Want(d, fams)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: building rules: %w", pod.Namespace, pod.Name, err)
	}
	states, err := r.deps.Tables.Current(ctx, netns, fams)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: reading rules in %s: %w", pod.Namespace, pod.Name, netns, err)
	}
	diff := podrules.Compare(sets, fams, states)
	if diff == nil {
		r.Forget(pod.UID)
		return Correct, nil
	}
	what := describe(states)
	log := r.deps.Log.With("pod", pod.Namespace+"/"+pod.Name, "netns", netns, "mode", string(r.cfg.Mode))
	log.Warn("meshed pod's redirect rules are "+what, "diff", diff.Error())

	switch r.cfg.Mode {
	case Off:
		r.warnOnce(ctx, pod, ReasonMissing, fmt.Sprintf(
			"the pod's redirect rules are %s, so its traffic bypasses the plexus proxy; repair is off on node %s", what, r.cfg.Node))
		r.deps.Metrics.Repairs.WithLabelValues(string(Reported)).Inc()
		return Reported, nil
	case Delete:
		return r.delete(ctx, pod, what, log)
	}
	if err := r.deps.Tables.Apply(ctx, netns, sets); err != nil {
		return "", fmt.Errorf("pod %s/%s: applying rules in %s: %w", pod.Namespace, pod.Name, netns, err)
	}
	// Read back: an apply that does not stick (another backend, something
	// rewriting the table) is a failure, not a repair.
	states, err = r.deps.Tables.Current(ctx, netns, fams)
	if err == nil {
		err = podrules.Compare(sets, fams, states)
	}
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: rules in %s still differ after applying them: %w", pod.Namespace, pod.Name, netns, err)
	}
	r.deps.Metrics.Repairs.WithLabelValues(string(Applied)).Inc()
	r.Forget(pod.UID)
	log.Info("applied the meshed pod's redirect rules")
	r.event(ctx, pod, corev1.EventTypeNormal, ReasonRepaired, fmt.Sprintf(
		"the pod's redirect rules were %s; plexus-node on %s applied them", what, r.cfg.Node))
	return Applied, nil
}

func (r *Repairer) delete(ctx context.Context, pod *corev1.Pod, what string, log *slog.Logger) (Outcome, error) {
	if metav1.GetControllerOf(pod) == nil {
		r.warnOnce(ctx, pod, ReasonMissing, fmt.Sprintf(
			"the pod's redirect rules are %s, so its traffic bypasses the plexus proxy; not deleted because no controller would recreate it: delete it yourself", what))
		r.deps.Metrics.Repairs.WithLabelValues(string(Reported)).Inc()
		return Reported, nil
	}
	r.warnOnce(ctx, pod, ReasonMissing, fmt.Sprintf(
		"the pod's redirect rules are %s; plexus-node on %s deletes the pod so that its controller recreates it with the rules", what, r.cfg.Node))
	uid := pod.UID
	err := r.deps.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, // never a pod that replaced it
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.deps.Metrics.Repairs.WithLabelValues(string(Deleted)).Inc()
	log.Info("deleted the meshed pod so that its controller recreates it")
	return Deleted, nil
}

// Failed records that a pod's check or repair failed: the metric, and one
// Warning Event per pod until it is repaired.
func (r *Repairer) Failed(ctx context.Context, pod *corev1.Pod, err error) {
	r.deps.Metrics.Repairs.WithLabelValues(string(failed)).Inc()
	r.deps.Log.Error("checking a meshed pod's redirect rules", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	r.warnOnce(ctx, pod, ReasonRepairFailed, truncate(err.Error(), 1000))
}

func (r *Repairer) warnOnce(ctx context.Context, pod *corev1.Pod, reason, message string) {
	r.mu.Lock()
	done := r.warned[pod.UID]
	r.warned[pod.UID] = true
	r.mu.Unlock()
	if !done {
		r.event(ctx, pod, corev1.EventTypeWarning, reason, message)
	}
}

// Forget drops what is remembered about a pod: repaired, or deleted.
func (r *Repairer) Forget(uid types.UID) {
	r.mu.Lock()
	delete(r.warned, uid)
	r.mu.Unlock()
}

// event records an Event on the pod; a failure is logged only (the
// repair itself is done).
func (r *Repairer) event(ctx context.Context, pod *corev1.Pod, eventType, reason, message string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := recordPodEvent(ctx, r.deps.Client, r.cfg.Node, pod, eventType, reason, message); err != nil {
		r.deps.Log.Error("recording an Event on a pod", "pod", pod.Namespace+"/"+pod.Name, "reason", reason, "err", err)
	}
}

// describe summarises what a pod's namespace held, for Events.
func describe(states map[rules.Family]rules.State) string {
	for _, st := range states {
		if !st.Empty() {
			return "different from the expected ones"
		}
	}
	return "missing"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// pluginPod is pod as the plugin reads it: the plugin decodes the API
// server's JSON into its own minimal Pod (it links nothing of k8s.io), so
// the repair hands it the same JSON and decides exactly as the plugin does.
func pluginPod(pod *corev1.Pod) (*podrules.Pod, error) {
	b, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	var p podrules.Pod
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return &p, nil
}
