package install

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// customize rewrites one object of deploy/ for cfg: container images and
// flags in pod templates, and the DaemonSet's host directories.
func customize(o object, cfg Config) error {
	switch kind(o) {
	case "Deployment", "DaemonSet":
	default:
		return nil
	}
	podSpec, err := mapAt(o, "spec", "template", "spec")
	if err != nil {
		return err
	}
	cs, err := containers(podSpec)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if img, ok := c["image"].(string); ok {
			c["image"] = image(img, cfg)
		}
		args, _ := c["args"].([]any)
		for i, a := range args {
			if s, ok := a.(string); ok {
				args[i] = arg(s, cfg)
			}
		}
	}
	if kind(o) == "DaemonSet" {
		return hostDirs(podSpec, cs, cfg)
	}
	return nil
}

// arg rewrites one container argument.
func arg(a string, cfg Config) string {
	name, val, ok := strings.Cut(a, "=")
	if !ok {
		return a
	}
	switch name {
	case "--trust-domain":
		return name + "=" + cfg.TrustDomain
	case "--cluster-domain":
		return name + "=" + cfg.ClusterDomain
	case "--proxy-image":
		return name + "=" + image(val, cfg)
	case "--proxy-version":
		return name + "=" + cfg.Version
	case "--cni-bin-dir":
		return name + "=" + cfg.CNIBinDir
	case "--cni-conf-dir":
		return name + "=" + cfg.CNIConfDir
	case "--default-inbound-policy":
		return name + "=" + cfg.DefaultInboundPolicy
	case "--cluster-networks":
		return name + "=" + cfg.ClusterNetworks
	}
	// Service addresses such as plexus-identity.plexus-system.svc.cluster.local:8080.
	const svc = ".svc." + DefaultClusterDomain
	if i := strings.Index(val, svc); i >= 0 {
		end := i + len(svc)
		if end == len(val) || val[end] == ':' || val[end] == '/' {
			return name + "=" + val[:i] + ".svc." + cfg.ClusterDomain + val[end:]
		}
	}
	return a
}

// image rewrites plexus.dev/<name>:<tag> to <registry>/<name>:<version>.
// Other images are left alone.
func image(ref string, cfg Config) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	if !strings.HasPrefix(repo, DefaultImageRegistry+"/") {
		return ref
	}
	return cfg.ImageRegistry + "/" + path.Base(repo) + ":" + cfg.Version
}

// hostDirs points the DaemonSet's CNI hostPath volumes, their mounts
// under the agent's --root and its flags at cfg's directories (the flags
// were rewritten by arg).
func hostDirs(podSpec object, cs []object, cfg Config) error {
	dirs := map[string]string{"cni-bin": cfg.CNIBinDir, "cni-conf": cfg.CNIConfDir}
	vols, _ := podSpec["volumes"].([]any)
	found := 0
	for _, v := range vols {
		vm, _ := v.(object)
		dir, ok := dirs[str(vm["name"])]
		if !ok {
			continue
		}
		hp, ok := vm["hostPath"].(object)
		if !ok {
			return fmt.Errorf("volume %s is not a hostPath", str(vm["name"]))
		}
		hp["path"] = dir
		found++
	}
	if found != len(dirs) {
		return errors.New("want hostPath volumes cni-bin and cni-conf")
	}
	for _, c := range cs {
		root := ""
		args, _ := c["args"].([]any)
		for _, a := range args {
			if v, ok := strings.CutPrefix(str(a), "--root="); ok {
				root = v
			}
		}
		mounts, _ := c["volumeMounts"].([]any)
		for _, m := range mounts {
			mm, _ := m.(object)
			if dir, ok := dirs[str(mm["name"])]; ok {
				if root == "" {
					return fmt.Errorf("container %s mounts %s but has no --root flag", str(c["name"]), str(mm["name"]))
				}
				mm["mountPath"] = path.Join(root, dir)
			}
		}
	}
	return nil
}

// makeHA sets a control-plane Deployment to HAReplicas spread over nodes
// and returns its PodDisruptionBudget.
func makeHA(d object) (object, error) {
	spec, err := mapAt(d, "spec")
	if err != nil {
		return nil, err
	}
	podSpec, err := mapAt(d, "spec", "template", "spec")
	if err != nil {
		return nil, err
	}
	match, err := mapAt(d, "spec", "selector", "matchLabels")
	if err != nil {
		return nil, err
	}
	spec["replicas"] = HAReplicas
	// Spread over nodes where there are enough: at most one replica more
	// on one node than on another (on one node all may run there), never
	// counting a node whose taints the pod does not tolerate, and
	// counting only the Deployment's current revision during a rollout.
	// Over zones, as far as the nodes allow.
	spread := func(key, when string) object {
		return object{
			"maxSkew":           1,
			"topologyKey":       key,
			"whenUnsatisfiable": when,
			"labelSelector":     object{"matchLabels": runtime.DeepCopyJSONValue(match)},
			"matchLabelKeys":    []any{"pod-template-hash"},
			"nodeTaintsPolicy":  "Honor",
		}
	}
	podSpec["topologySpreadConstraints"] = []any{
		spread("kubernetes.io/hostname", "DoNotSchedule"),
		spread("topology.kubernetes.io/zone", "ScheduleAnyway"),
	}
	meta, err := mapAt(d, "metadata")
	if err != nil {
		return nil, err
	}
	pdbMeta := object{"name": meta["name"], "namespace": meta["namespace"]}
	if l, ok := meta["labels"].(object); ok {
		pdbMeta["labels"] = runtime.DeepCopyJSONValue(l)
	}
	return object{
		"apiVersion": "policy/v1",
		"kind":       "PodDisruptionBudget",
		"metadata":   pdbMeta,
		"spec": object{
			"minAvailable": 1,
			"selector":     object{"matchLabels": runtime.DeepCopyJSONValue(match)},
		},
	}, nil
}

// mapAt walks o along keys, each of which must hold a map.
func mapAt(o object, keys ...string) (object, error) {
	cur := o
	for i, k := range keys {
		next, ok := cur[k].(object)
		if !ok {
			return nil, fmt.Errorf("no map at %s", strings.Join(keys[:i+1], "."))
		}
		cur = next
	}
	return cur, nil
}

// containers returns the init and regular containers of a pod spec.
func containers(podSpec object) ([]object, error) {
	var out []object
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := podSpec[key].([]any)
		for i, c := range list {
			cm, ok := c.(object)
			if !ok {
				return nil, fmt.Errorf("%s[%d] is not a map", key, i)
			}
			out = append(out, cm)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("pod template has no containers")
	}
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
