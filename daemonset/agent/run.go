package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/pluginreport"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
	"github.com/plexus-mesh/plexus/daemonset/conflist"
	"github.com/plexus-mesh/plexus/daemonset/guard"
	"github.com/plexus-mesh/plexus/daemonset/nodeevents"
	"github.com/plexus-mesh/plexus/daemonset/nodetaint"
	"github.com/plexus-mesh/plexus/daemonset/pluginentry"
	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
	"github.com/plexus-mesh/plexus/daemonset/pluginmetrics"
	"github.com/plexus-mesh/plexus/daemonset/podlookup"
	"github.com/plexus-mesh/plexus/daemonset/podnetns"
	"github.com/plexus-mesh/plexus/daemonset/repair"
)

// Deps are what Run is handed rather than builds.
type Deps struct {
	Registry *prometheus.Registry
	Log      *slog.Logger
	Listener net.Listener // for /ready and /metrics
	// Taint, if not nil, removes the node's cni-not-ready taint each time
	// the agent becomes ready.
	Taint *nodetaint.Remover
	// Events, if not nil, records bad configs and fights on the node.
	Events *nodeevents.Recorder
	// Pods, if not nil, is the API client of the repair of meshed pods'
	// rules (RunConfig.Repair); nil: no repair.
	Pods kubernetes.Interface
	// Owner, if not nil, is checked when Run ends: if the agent's
	// DaemonSet is gone or being deleted, the plugin is uninstalled.
	Owner *Owner
}

// Run installs the plugin and keeps it in place until ctx ends, serving
// /ready and /metrics. Ending leaves the plugin installed (an upgrade's
// SIGTERM must not open a window without redirection) unless Deps.Owner
// says the DaemonSet itself is being removed: then it uninstalls.
func Run(ctx context.Context, cfg RunConfig, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	reg, log, ln := deps.Registry, deps.Log, deps.Listener
	m := NewMetrics(reg)
	ready := newReadiness(m, log)
	if deps.Taint != nil {
		if err := deps.Taint.Validate(); err != nil {
			return err
		}
		go removeTaint(ctx, deps.Taint, ready.becameReady, m, log)
	}
	if deps.Events != nil {
		if err := deps.Events.Validate(); err != nil {
			return err
		}
		ready.events = make(chan nodeEvent, 16)
		go recordEvents(ctx, deps.Events, ready.events, m, log)
	}

	srv := &http.Server{Handler: handler(ready, reg), ReadHeaderTimeout: 5 * time.Second}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-srvDone
	}()

	if wrote, err := plugininstall.Binary(cfg.PluginBinary, cfg.At(cfg.CNIBinDir)); err != nil {
		m.Errors.WithLabelValues("install").Inc()
		return err
	} else if wrote {
		m.Installs.WithLabelValues("binary").Inc()
		log.Info("installed plugin binary", "dir", cfg.CNIBinDir)
	}
	kubeconfig := cfg.Kubeconfig
	var creds *plugininstall.Credentials
	if kubeconfig == "" {
		creds = &plugininstall.Credentials{
			Dir: cfg.At(cfg.StateDir), HostDir: cfg.StateDir,
			Server: cfg.APIServer, CAFile: cfg.CAFile, TokenSource: cfg.TokenSource,
		}
		if wrote, err := creds.Install(); err != nil {
			m.Errors.WithLabelValues("install").Inc()
			return err
		} else if wrote {
			m.Installs.WithLabelValues("credentials").Inc()
		}
		kubeconfig = creds.HostKubeconfigPath()
	}
	sockets := pluginentry.Sockets{Report: listenReports(ctx, cfg.Paths, reg, m, log)}
	var nodePods informers.SharedInformerFactory
	if deps.Pods != nil {
		if err := cfg.Repair.Validate(); err != nil {
			return err
		}
		nodePods = repair.NodeFactory(deps.Pods, cfg.Repair.Node, cfg.Repair.Resync)
		sockets.Pods = listenPodLookups(ctx, cfg.Paths, nodePods, reg, m, log)
	}
	entry, err := buildEntry(cfg.PluginConfig, kubeconfig, sockets)
	if err != nil {
		return err
	}

	if creds != nil {
		go syncToken(ctx, creds, cfg.TokenSync, m, log)
	}
	if deps.Pods != nil {
		if err := startRepair(ctx, cfg, entry, deps, nodePods, m); err != nil {
			return err
		}
	}
	p := patcher(cfg.Paths, entry)
	bin := &binaryKeeper{src: cfg.PluginBinary, dir: cfg.At(cfg.CNIBinDir), m: m, log: log}
	patch := func() (conflist.Result, error) {
		if err := bin.ensure(); err != nil {
			return conflist.Result{}, err
		}
		return p.Patch()
	}
	gcfg := guard.Config{Dir: cfg.At(cfg.CNIConfDir), Patch: patch, Resync: cfg.Resync, Binary: bin.path()}
	if err := guard.Run(ctx, gcfg, ready); err != nil {
		return fmt.Errorf("guarding the CNI config: %w", err)
	}
	if deps.Owner != nil {
		if err := leaveOrRemove(deps.Owner, cfg.Paths, log); err != nil {
			return err
		}
	}
	select {
	case err := <-srvDone:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving /ready and /metrics: %w", err)
		}
	default:
	}
	return nil
}

// startRepair runs the repair (cfg.Repair, validated by Run) in the
// background with the plugin's own settings (entry). A node whose iptables
// backend cannot be read runs without repair: installing the plugin
// matters more.
func startRepair(ctx context.Context, cfg RunConfig, entry []byte, deps Deps, nodePods informers.SharedInformerFactory, m *Metrics) error {
	log := deps.Log.With("component", "repair")
	conf, err := netconf.ParseConf(entry)
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	rm := repair.NewMetrics(deps.Registry)
	finder, err := podnetns.New(cfg.At(cfg.NetnsDir))
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	rdeps := repair.Deps{Client: deps.Pods, Factory: nodePods, Plugin: conf, Netns: finder, Metrics: rm, Log: log}
	go func() {
		mode, reason, err := xtables.Resolve(ctx, conf.Mode())
		if err != nil {
			m.Errors.WithLabelValues("repair").Inc()
			log.Error("no repair of meshed pods: cannot choose the iptables backend", "err", err)
			return
		}
		log.Info("iptables backend for repairs", "backend", string(mode), "reason", reason)
		rdeps.Tables = netnsrules.NewNetnsTables(mode, netnsrules.LockWait, log)
		if err := repair.Run(ctx, cfg.Repair, rdeps); err != nil {
			m.Errors.WithLabelValues("repair").Inc()
			log.Error("repair of meshed pods stopped", "err", err)
		}
	}()
	return nil
}

// listenReports counts the plugin's reports (pluginmetrics) received on
// the report socket until ctx ends, and returns the socket's host path for
// the conflist entry ("" without one: the plugin then sends nothing).
func listenReports(ctx context.Context, paths Paths, reg prometheus.Registerer, m *Metrics, log *slog.Logger) string {
	pm := pluginmetrics.NewMetrics(reg)
	return servePluginSocket(ctx, paths, paths.ReportSocket(), "report", "no plugin ADD/DEL/CHECK metrics", m, log,
		func(path string) (func() error, error) {
			l, err := pluginreport.Listen(path)
			if err != nil {
				return nil, err
			}
			return func() error { return pluginmetrics.Serve(ctx, l, pm, log) }, nil
		})
}

// listenPodLookups answers the plugin's pod lookups (podlookup) from the
// node's pod informer on the pod socket until ctx ends, and returns the
// socket's host path for the conflist entry ("" without one: the plugin
// then reads every pod from the API server).
func listenPodLookups(ctx context.Context, paths Paths, nodePods informers.SharedInformerFactory, reg prometheus.Registerer, m *Metrics, log *slog.Logger) string {
	pm := podlookup.NewMetrics(reg)
	return servePluginSocket(ctx, paths, paths.PodSocket(), "lookup", "the plugin will read every pod from the API server", m, log,
		func(path string) (func() error, error) {
			l, err := podlookup.Listen(path)
			if err != nil {
				return nil, err
			}
			h := podlookup.Handler(nodePods.Core().V1().Pods().Lister(), pm)
			nodePods.Start(ctx.Done())
			return func() error { return podlookup.Serve(ctx, l, h) }, nil
		})
}

// servePluginSocket starts one of the agent's sockets for the plugin, at
// host path sock in the state dir: listen binds it and returns what serves
// it until ctx ends. Neither socket is worth failing the install for: one
// that cannot be made is logged (without says what the plugin does
// without), counted as an error of stage, and "" is returned, so the
// conflist entry leaves it out.
func servePluginSocket(ctx context.Context, paths Paths, sock, stage, without string, m *Metrics, log *slog.Logger, listen func(path string) (func() error, error)) string {
	serve, err := func() (func() error, error) {
		if err := os.MkdirAll(paths.At(paths.StateDir), 0o700); err != nil {
			return nil, err
		}
		return listen(paths.At(sock))
	}()
	if err != nil {
		m.Errors.WithLabelValues(stage).Inc()
		log.Error(without+": cannot listen on the plugin's socket", "socket", sock, "err", err)
		return ""
	}
	go func() {
		if err := serve(); err != nil {
			m.Errors.WithLabelValues(stage).Inc()
			log.Error("stopped serving the plugin's socket", "socket", sock, "err", err)
		}
	}()
	return sock
}

// syncToken copies the rotated service account token for the plugin,
// now and every interval.
func syncToken(ctx context.Context, c *plugininstall.Credentials, every time.Duration, m *Metrics, log *slog.Logger) {
	wait.UntilWithContext(ctx, func(context.Context) {
		wrote, err := c.SyncToken()
		switch {
		case err != nil:
			m.Errors.WithLabelValues("token").Inc()
			log.Error("copying the service account token for the plugin", "err", err)
		case wrote:
			m.TokenSyncs.Inc()
		}
	}, every)
}

// removeTaint removes the node's taint each time the agent becomes ready,
// retrying with backoff while the API server refuses.
func removeTaint(ctx context.Context, r *nodetaint.Remover, becameReady <-chan struct{}, m *Metrics, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-becameReady:
		}
		for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
			removed, err := r.Remove(ctx)
			if err == nil {
				if removed {
					m.TaintRemovals.Inc()
					log.Info("removed node taint", "taint", nodetaint.Key, "node", r.Node)
				}
				break
			}
			m.Errors.WithLabelValues("taint").Inc()
			log.Error("removing node taint", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// recordEvents creates the node's Events off the guard's goroutine.
func recordEvents(ctx context.Context, r *nodeevents.Recorder, events <-chan nodeEvent, m *Metrics, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			if _, err := r.Record(ctx, ev.typ, ev.reason, ev.message); err != nil {
				m.Errors.WithLabelValues("event").Inc()
				log.Error("recording an Event on the node", "err", err)
			}
		}
	}
}

// binaryKeeper puts the plugin binary back when it goes missing or is
// replaced (a CNI reinstall, a k3s upgrade switching its bin dir). The
// guard calls it on every change to the file and at every resync. A check
// costs two stats while the file is the one it last found right (same
// inode, size, mtime and mode); anything else is compared by content.
type binaryKeeper struct {
	src, dir string
	m        *Metrics
	log      *slog.Logger
	verified os.FileInfo // the installed file as last found equal to src
}

func (b *binaryKeeper) path() string { return filepath.Join(b.dir, plugininstall.PluginBinary) }

func (b *binaryKeeper) ensure() error {
	want, err := os.Stat(b.src)
	if err != nil {
		return fmt.Errorf("plugin binary: %w", err)
	}
	got, err := os.Stat(b.path())
	if err == nil && b.verified != nil && os.SameFile(got, b.verified) && got.Size() == want.Size() &&
		got.ModTime().Equal(b.verified.ModTime()) && got.Mode().Perm() == 0o755 {
		return nil
	}
	wrote, err := plugininstall.Binary(b.src, b.dir)
	if err != nil {
		b.m.Errors.WithLabelValues("install").Inc()
		return err
	}
	if wrote {
		b.m.Installs.WithLabelValues("binary").Inc()
		b.log.Warn("plugin binary was missing or changed; installed it again", "dir", b.dir)
	}
	b.verified, _ = os.Stat(b.path()) // on error: compare by content next time
	return nil
}

// leaveOrRemove runs at shutdown: the plugin stays for an upgrade or a
// restarted pod, and is uninstalled when the DaemonSet is being removed.
// When the API cannot say, it stays (a wrong removal would let pods start
// without redirection).
func leaveOrRemove(o *Owner, paths Paths, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	removed, err := o.Removed(ctx)
	if err != nil {
		log.Warn("leaving the plugin installed: cannot tell whether the DaemonSet is being removed", "err", err)
		return nil
	}
	if !removed {
		log.Info("leaving the plugin installed for the next agent", "daemonset", o.Namespace+"/"+o.Name)
		return nil
	}
	if err := Uninstall(paths); err != nil {
		return fmt.Errorf("DaemonSet %s/%s removed, uninstalling the plugin: %w", o.Namespace, o.Name, err)
	}
	log.Info("DaemonSet removed: uninstalled the plugin from this node", "daemonset", o.Namespace+"/"+o.Name)
	return nil
}
