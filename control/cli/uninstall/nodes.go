package uninstall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/plexus-mesh/plexus/control/cli/install"
)

// cleanNodes deletes the node agent, waits for its pods to go, then runs
// the cleanup DaemonSet and waits until it is ready on every node.
func (u Uninstaller) cleanNodes(ctx context.Context, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dss := u.Client.AppsV1().DaemonSets(install.Namespace)
	want, err := u.cleanupDaemonSet(cfg.Install)
	if err != nil {
		return err
	}
	agent, err := dss.Get(ctx, AgentDaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		agent = nil
		u.progress("no DaemonSet %s/%s: the node agent is already gone", install.Namespace, AgentDaemonSet)
	case err != nil:
		return fmt.Errorf("reading the node agent's DaemonSet: %w", err)
	default:
		if err := adopt(want, agent); err != nil {
			return err
		}
		u.progress("deleting DaemonSet %s/%s (a running agent would put plexus-cni back)", install.Namespace, AgentDaemonSet)
		fg := metav1.DeletePropagationForeground
		if err := dss.Delete(ctx, AgentDaemonSet, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the node agent's DaemonSet: %w", err)
		}
	}
	if err := u.waitAgentGone(ctx, cfg.Timeout); err != nil {
		return err
	}

	if err := u.ensureNamespace(ctx); err != nil {
		return err
	}
	cur, err := dss.Get(ctx, CleanupDaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := dss.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating DaemonSet %s/%s: %w", install.Namespace, CleanupDaemonSet, err)
		}
	case err != nil:
		return fmt.Errorf("reading DaemonSet %s/%s: %w", install.Namespace, CleanupDaemonSet, err)
	case agent != nil:
		// Left by an earlier attempt while an agent ran again: point it at
		// what this agent used.
		want.ResourceVersion = cur.ResourceVersion
		if _, err := dss.Update(ctx, want, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating DaemonSet %s/%s: %w", install.Namespace, CleanupDaemonSet, err)
		}
	default:
		// Left by an earlier attempt, made from the agent that is gone
		// now: it knows the node's dirs better than the flags do.
		u.progress("DaemonSet %s/%s is left from an earlier uninstall; using it as it is", install.Namespace, CleanupDaemonSet)
	}
	u.progress("running plexus-node uninstall on every node (DaemonSet %s/%s), waiting up to %v", install.Namespace, CleanupDaemonSet, cfg.Timeout)
	return u.waitCleaned(ctx, cfg.Timeout)
}

// ensureNamespace creates the namespace for the cleanup if it is gone: a
// namespace deleted by hand takes the agent with it but leaves plexus-cni
// on the nodes, with credentials that no longer work.
func (u Uninstaller) ensureNamespace(ctx context.Context) error {
	nss := u.Client.CoreV1().Namespaces()
	_, err := nss.Get(ctx, install.Namespace, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("reading namespace %s: %w", install.Namespace, err)
		}
		return nil
	}
	u.progress("namespace %s is gone; creating it again for the cleanup (it is deleted at the end)", install.Namespace)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace, Labels: map[string]string{
		"app.kubernetes.io/part-of":          "plexus",
		"pod-security.kubernetes.io/enforce": "privileged", // hostPath, like the agent
	}}}
	if _, err := nss.Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", install.Namespace, err)
	}
	return nil
}

// cleanupDaemonSet renders deploy/plexus-node-cleanup for cfg.
func (u Uninstaller) cleanupDaemonSet(cfg install.Config) (*appsv1.DaemonSet, error) {
	obj, err := u.Renderer.NodeCleanup(cfg)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding the cleanup DaemonSet: %w", err)
	}
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(b, &ds); err != nil {
		return nil, fmt.Errorf("decoding the cleanup DaemonSet: %w", err)
	}
	return &ds, nil
}

// dirFlags are the agent flags that say which host dirs it wrote to.
var dirFlags = []string{"--root", "--cni-bin-dir", "--cni-conf-dir", "--state-dir"}

// adopt points the cleanup DaemonSet at exactly what the running agent
// uses: its image, pull secrets and node placement, its hostPath volumes
// and mounts, and its dir flags. Install flags or later edits of the
// agent's DaemonSet then cannot make the cleanup miss a dir.
func adopt(cleanup, agent *appsv1.DaemonSet) error {
	as, cs := &agent.Spec.Template.Spec, &cleanup.Spec.Template.Spec
	if len(as.Containers) == 0 || len(cs.InitContainers) != 1 {
		return fmt.Errorf("DaemonSet %s/%s has no container, or the cleanup DaemonSet no init container", agent.Namespace, agent.Name)
	}
	ac, un := as.Containers[0], &cs.InitContainers[0]
	for _, c := range []*corev1.Container{un, &cs.Containers[0]} {
		c.Image, c.ImagePullPolicy = ac.Image, ac.ImagePullPolicy
	}
	cs.ImagePullSecrets, cs.NodeSelector, cs.Affinity = as.ImagePullSecrets, as.NodeSelector, as.Affinity
	for i, a := range un.Args {
		name, _, _ := strings.Cut(a, "=")
		if !slices.Contains(dirFlags, name) {
			continue
		}
		for _, b := range ac.Args {
			if strings.HasPrefix(b, name+"=") {
				un.Args[i] = b
			}
		}
	}
	for i := range cs.Volumes {
		v := &cs.Volumes[i]
		j := slices.IndexFunc(as.Volumes, func(av corev1.Volume) bool { return av.Name == v.Name && av.HostPath != nil })
		if j < 0 {
			return fmt.Errorf("DaemonSet %s/%s has no hostPath volume %q: cannot tell which host dir to clean", agent.Namespace, agent.Name, v.Name)
		}
		v.HostPath = as.Volumes[j].HostPath
	}
	for i := range un.VolumeMounts {
		m := &un.VolumeMounts[i]
		if j := slices.IndexFunc(ac.VolumeMounts, func(am corev1.VolumeMount) bool { return am.Name == m.Name }); j >= 0 {
			m.MountPath = ac.VolumeMounts[j].MountPath
		}
	}
	return nil
}

// agentSelector finds the node agent's pods.
var agentSelector = labels.Set{"app.kubernetes.io/name": AgentDaemonSet}.String()

// waitAgentGone waits until no node agent pod is left: one still
// terminating could patch the entry back after the cleanup removed it.
func (u Uninstaller) waitAgentGone(ctx context.Context, timeout time.Duration) error {
	var left []string
	err := wait.PollUntilContextCancel(ctx, u.Poll, true, func(ctx context.Context) (bool, error) {
		pods, err := u.Client.CoreV1().Pods(install.Namespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
		if err != nil {
			return false, fmt.Errorf("listing the node agent's pods: %w", err)
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, fmt.Sprintf("%s (node %s)", p.Name, p.Spec.NodeName))
		}
		return len(left) == 0, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the node agent's pods were not gone within %v: %s; nothing was removed", timeout, strings.Join(left, ", "))
	}
	return err
}

// waitCleaned waits until the cleanup DaemonSet is ready on every node it
// should run on; on timeout the error names each node that is not.
func (u Uninstaller) waitCleaned(ctx context.Context, timeout time.Duration) error {
	var last *appsv1.DaemonSet
	err := wait.PollUntilContextCancel(ctx, u.Poll, true, func(ctx context.Context) (bool, error) {
		ds, err := u.Client.AppsV1().DaemonSets(install.Namespace).Get(ctx, CleanupDaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading DaemonSet %s/%s: %w", install.Namespace, CleanupDaemonSet, err)
		}
		last = ds
		s := ds.Status
		return s.ObservedGeneration >= ds.Generation && s.NumberReady == s.DesiredNumberScheduled &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		// ctx is spent; describe the nodes with a fresh, short one.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return u.notCleaned(dctx, last, timeout)
	}
	if err != nil {
		return err
	}
	u.progress("plexus-cni is removed from all %d nodes", last.Status.DesiredNumberScheduled)
	return nil
}

// notCleaned is the error for a cleanup that did not finish: each node
// without a ready cleanup pod, and why.
func (u Uninstaller) notCleaned(ctx context.Context, ds *appsv1.DaemonSet, timeout time.Duration) error {
	var ready, desired int32
	if ds != nil {
		ready, desired = ds.Status.NumberReady, ds.Status.DesiredNumberScheduled
	}
	var problems []string
	seen := map[string]bool{}
	sel := labels.Set{"app.kubernetes.io/name": CleanupDaemonSet}.String()
	pods, err := u.Client.CoreV1().Pods(install.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err == nil {
		for _, p := range pods.Items {
			seen[p.Spec.NodeName] = true
			if why := podProblem(&p); why != "" {
				problems = append(problems, fmt.Sprintf("node %s: %s", nodeName(&p), why))
			}
		}
	}
	if nodes, err := u.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			if !seen[n.Name] {
				problems = append(problems, fmt.Sprintf("node %s: no cleanup pod", n.Name))
			}
		}
	}
	slices.Sort(problems)
	if len(problems) == 0 {
		problems = []string{fmt.Sprintf("DaemonSet status: %d of %d ready", ready, desired)}
	}
	return fmt.Errorf("plexus-cni was not removed from every node within %v (%d of %d cleanup pods ready):\n  %s\n"+
		"Nothing else was deleted. Fix those nodes (`kubectl -n %s describe pods -l %s`) or remove plexus-cni there "+
		"by hand (`plexus-node uninstall`), then run plexusctl uninstall again",
		timeout, ready, desired, strings.Join(problems, "\n  "), install.Namespace, sel)
}

func nodeName(p *corev1.Pod) string {
	if p.Spec.NodeName == "" {
		return "(none yet, pod " + p.Name + ")"
	}
	return p.Spec.NodeName
}

// podProblem says why a cleanup pod is not ready, "" if it is.
func podProblem(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		var why string
		switch {
		case s.State.Terminated != nil && s.State.Terminated.ExitCode == 0:
			continue
		case s.State.Waiting != nil:
			why = s.State.Waiting.Reason
		case s.State.Terminated != nil:
			why = fmt.Sprintf("exit code %d", s.State.Terminated.ExitCode)
		case s.State.Running != nil:
			why = "running"
		}
		if t := s.LastTerminationState.Terminated; t != nil && t.Message != "" {
			why += ": " + firstLine(t.Message)
		} else if t := s.State.Terminated; t != nil && t.Message != "" {
			why += ": " + firstLine(t.Message)
		}
		return fmt.Sprintf("init container %s: %s", s.Name, why)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf("%s: %s", c.Reason, firstLine(c.Message))
		}
	}
	return fmt.Sprintf("pod %s is %s, not ready", p.Name, p.Status.Phase)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
