// Package plugin is the plexus-cni chained CNI plugin's skel adapter: ADD,
// DEL, CHECK, STATUS and GC. What a pod wants comes from podrules, the
// configuration from netconf, and the rules are applied in the pod's
// network namespace by netnsrules.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/plexus-mesh/plexus/cni-plugin/addlog"
	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
)

// Plugin-specific CNI error codes (the spec reserves 0-99).
const (
	ErrCodeBadAnnotation uint = 100 // a config.plexus.dev/* annotation is malformed
	ErrCodeAPI           uint = 101 // the pod GET failed for a non-Transient reason
	ErrCodeRules         uint = 102 // iptables could not be read or written
	ErrCodeCheck         uint = 103 // CHECK found rules that differ from the expected ones
)

// SupportedVersions are the CNI spec versions plexus-cni speaks: 0.3.x
// too, the version of kube-flannel's conflist (a runtime never sends
// CHECK below 0.4.0).
func SupportedVersions() []string { return []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} }

// Tables reads and writes our rules in a network namespace.
type Tables interface {
	Apply(ctx context.Context, netns string, sets []rules.RuleSet) error
	Remove(ctx context.Context, netns string) error
	Current(ctx context.Context, netns string, fams []rules.Family) (map[rules.Family]rules.State, error)
}

// Plugin holds the injected dependencies of one invocation.
type Plugin struct {
	Stdout io.Writer
	Retry  podrules.Retry
	// NewLog builds the logger from the config; the func closes it.
	NewLog func(conf *netconf.NetConf) (*slog.Logger, func())
	// Pods builds the pod getter; called only when a lookup is needed.
	Pods func(conf *netconf.NetConf) (podrules.PodGetter, error)
	// Tables builds the rule applier for the configured backend.
	Tables func(conf *netconf.NetConf, log *slog.Logger) Tables
}

func (p *Plugin) logger(conf *netconf.NetConf, cmd string, args *skel.CmdArgs) (*slog.Logger, func()) {
	if p.NewLog == nil {
		return slog.New(slog.DiscardHandler), func() {}
	}
	log, done := p.NewLog(conf)
	return log.With("cmd", cmd, "container", args.ContainerID, "netns", args.Netns), done
}

// Funcs returns the skel callbacks.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}

// k8sArgs are the CNI_ARGS the kubelet's runtime passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString
	K8S_POD_NAME               types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString
	K8S_POD_UID                types.UnmarshallableString
}

func cniErr(code uint, msg string, err error) *types.Error {
	if err == nil {
		return types.NewError(code, msg, "")
	}
	return types.NewError(code, msg+": "+err.Error(), "")
}

func (p *Plugin) load(args *skel.CmdArgs, validate bool) (*netconf.NetConf, *types.Error) {
	conf, err := netconf.ParseConf(args.StdinData)
	if err != nil {
		return nil, cniErr(types.ErrDecodingFailure, "plexus-cni: invalid plugin config", err)
	}
	if validate {
		if err := conf.Validate(); err != nil {
			return nil, cniErr(types.ErrInvalidNetworkConfig, "plexus-cni: invalid plugin config", err)
		}
	}
	return conf, nil
}

// Decide determines whether the pod named in CNI_ARGS is meshed. Pods that
// are not Kubernetes pods, pods in excluded namespaces and node agent pods
// are decided without any API call; otherwise the pod comes from the node
// agent's cache when the config names its pod socket and the agent holds
// it, else from one GET (with bounded retries). beforeGet (if not nil) is
// called just before the lookup.
func (p *Plugin) Decide(ctx context.Context, log *slog.Logger, conf *netconf.NetConf, cniArgs string, beforeGet func()) (podrules.Decision, *types.Error) {
	var ka k8sArgs
	ka.IgnoreUnknown = true
	if err := types.LoadArgs(cniArgs, &ka); err != nil {
		return podrules.Decision{}, cniErr(types.ErrInvalidEnvironmentVariables, "plexus-cni: parsing CNI_ARGS", err)
	}
	namespace, name := string(ka.K8S_POD_NAMESPACE), string(ka.K8S_POD_NAME)
	if namespace == "" || name == "" {
		return podrules.Decision{Reason: "not a Kubernetes pod (no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS)"}, nil
	}
	if reason := podrules.SkippedByName(conf, namespace, name); reason != "" {
		return podrules.Decision{Reason: reason}, nil
	}
	if beforeGet != nil {
		beforeGet()
	}
	uid := string(ka.K8S_POD_UID)
	pod := podrules.FromAgent(ctx, log, conf.PodSocket, namespace, name, uid)
	if pod == nil {
		getter, err := p.Pods(conf)
		if err != nil {
			return podrules.Decision{}, cniErr(types.ErrPluginNotAvailable, "plexus-cni: cannot reach the Kubernetes API", err)
		}
		getStart := time.Now()
		pod, err = podrules.GetPod(ctx, getter, p.Retry, namespace, name)
		log.Debug("pod GET", "get_ms", addlog.Millis(time.Since(getStart)), "error", err)
		if err != nil {
			code := ErrCodeAPI
			if podrules.Transient(err) {
				code = types.ErrTryAgainLater
			}
			return podrules.Decision{}, cniErr(code, "plexus-cni: reading the pod from the Kubernetes API failed", err)
		}
	}
	if uid != "" && uid != string(pod.UID) {
		return podrules.Decision{}, cniErr(types.ErrTryAgainLater, fmt.Sprintf(
			"plexus-cni: pod %s/%s has UID %s but the runtime asked for UID %s (the pod was replaced)", namespace, name, pod.UID, uid), nil)
	}
	d, err := podrules.DecidePod(conf, pod)
	switch {
	case errors.Is(err, podrules.ErrInvalidConfig):
		return podrules.Decision{}, cniErr(types.ErrInvalidNetworkConfig, "plexus-cni", err)
	case err != nil:
		return podrules.Decision{}, cniErr(ErrCodeBadAnnotation, "plexus-cni", err)
	}
	return d, nil
}

// families are the IP families to write rules for, from the primary
// plugin's result.
func families(prev types.Result) ([]rules.Family, error) {
	if prev == nil {
		return podrules.Families(nil), nil
	}
	res, err := current.NewResultFromResult(prev)
	if err != nil {
		return nil, fmt.Errorf("converting prevResult: %w", err)
	}
	addrs := make([]netip.Addr, 0, len(res.IPs))
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			addrs = append(addrs, a.Unmap())
		}
	}
	return podrules.Families(addrs), nil
}

// command runs one CNI command: it loads the network configuration
// (validate: checking it), logs under the command's name, hands both to
// run, and reports how the command ended (report.go) however it ends.
func (p *Plugin) command(cmd string, args *skel.CmdArgs, validate bool,
	run func(*skel.CmdArgs, *commandReport, *netconf.NetConf, *slog.Logger) error,
) (err error) {
	rep := newReport(cmd, args)
	defer func() { p.sendReport(rep, err) }()
	conf, cerr := p.load(args, validate)
	if cerr != nil {
		return cerr
	}
	log, done := p.logger(conf, cmd, args)
	defer done()
	return run(args, rep, conf, log)
}

// Add installs the redirect rules for a meshed pod and passes prevResult
// through unchanged.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	return p.command("ADD", args, true, p.add)
}

func (p *Plugin) add(args *skel.CmdArgs, rep *commandReport, conf *netconf.NetConf, log *slog.Logger) error {
	start := rep.start
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "plexus-cni: no prevResult; it must be chained after a primary plugin", "")
	}
	ctx := context.Background()
	tables := p.Tables(conf, log)
	var prepare func()
	if pr, ok := tables.(Preparer); ok {
		defer pr.Release()
		if fams, err := families(conf.PrevResult); err == nil {
			prepare = func() { pr.Prepare(args.Netns, fams) } // start iptables-restore during the pod lookup
		}
	}
	d, cerr := p.Decide(ctx, log, conf, args.Args, prepare)
	decided := time.Since(start)
	if cerr != nil {
		log.Error("ADD failed", "args", args.Args, "error", cerr)
		return cerr
	}
	rep.decidedAfter(d.Mesh, decided)
	if d.Mesh {
		fams, err := families(conf.PrevResult)
		if err != nil {
			return cniErr(types.ErrDecodingFailure, "plexus-cni", err)
		}
		sets, err := podrules.Want(d, fams)
		if err != nil {
			return cniErr(types.ErrInternal, "plexus-cni: building rules", err)
		}
		if err := tables.Apply(ctx, args.Netns, sets); err != nil {
			code := ErrCodeRules
			if errors.Is(err, netnsrules.ErrNetnsGone) {
				code = types.ErrInvalidNetNS
			}
			log.Error("ADD failed", "error", err)
			return cniErr(code, "plexus-cni: installing redirect rules in "+args.Netns, err)
		}
	}
	log.Info("ADD done", "mesh", d.Mesh, "reason", d.Reason, "args", args.Args,
		"decide_ms", addlog.Millis(decided), "elapsed_ms", addlog.Millis(time.Since(start)))
	if _, err := p.Stdout.Write(conf.RawPrevResult()); err != nil {
		return cniErr(types.ErrIOFailure, "plexus-cni: writing result", err)
	}
	return nil
}

// Del removes our rules if the network namespace still exists. It reads
// no pod and never fails because the namespace or the pod is gone.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	return p.command("DEL", args, false, p.del)
}

func (p *Plugin) del(args *skel.CmdArgs, _ *commandReport, conf *netconf.NetConf, log *slog.Logger) error {
	if conf.Mode().Validate() != nil {
		conf.IptablesMode = ""
	}
	if args.Netns == "" {
		log.Info("DEL: no network namespace, nothing to do")
		return nil
	}
	err := p.Tables(conf, log).Remove(context.Background(), args.Netns)
	switch {
	case errors.Is(err, netnsrules.ErrNetnsGone):
		log.Info("DEL: network namespace already gone", "netns", args.Netns)
		return nil
	case err != nil:
		log.Error("DEL failed", "error", err)
		return cniErr(ErrCodeRules, "plexus-cni: removing redirect rules in "+args.Netns, err)
	}
	log.Info("DEL done", "netns", args.Netns)
	return nil
}

// Check verifies that the namespace holds exactly the rules the pod should
// have (none for a pod that is not meshed).
func (p *Plugin) Check(args *skel.CmdArgs) error {
	return p.command("CHECK", args, true, p.check)
}

func (p *Plugin) check(args *skel.CmdArgs, _ *commandReport, conf *netconf.NetConf, log *slog.Logger) error {
	ctx := context.Background()
	d, cerr := p.Decide(ctx, log, conf, args.Args, nil)
	if cerr != nil {
		log.Error("CHECK failed", "args", args.Args, "error", cerr)
		return cerr
	}
	fams, err := families(conf.PrevResult)
	if err != nil {
		return cniErr(types.ErrDecodingFailure, "plexus-cni", err)
	}
	states, err := p.Tables(conf, log).Current(ctx, args.Netns, fams)
	if err != nil {
		code := ErrCodeRules
		if errors.Is(err, netnsrules.ErrNetnsGone) {
			code = types.ErrInvalidNetNS
		}
		return cniErr(code, "plexus-cni: reading rules in "+args.Netns, err)
	}
	if err := podrules.Diff(d, fams, states); err != nil {
		msg := fmt.Sprintf("plexus-cni: CHECK failed (%s): %s", d.Reason, err)
		log.Error("CHECK failed", "error", msg)
		return types.NewError(ErrCodeCheck, msg, "")
	}
	log.Debug("CHECK ok", "mesh", d.Mesh, "reason", d.Reason)
	return nil
}

// Status reports whether the plugin can work at all: the config is valid,
// the kubeconfig loads, and the iptables binaries exist.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, cerr := p.load(args, true)
	if cerr != nil {
		return cerr
	}
	if _, err := p.Pods(conf); err != nil {
		return cniErr(types.ErrPluginNotAvailable, "plexus-cni: not ready", err)
	}
	if err := probeBinaries(conf); err != nil {
		return cniErr(types.ErrPluginNotAvailable, "plexus-cni: not ready", err)
	}
	return nil
}

// GC has nothing to collect: all our state lives in pod network namespaces,
// which disappear with their pods.
func (p *Plugin) GC(*skel.CmdArgs) error { return nil }

// PluginInfo is what VERSION reports.
func PluginInfo() version.PluginInfo { return version.PluginSupports(SupportedVersions()...) }
