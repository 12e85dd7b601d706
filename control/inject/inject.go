// Package inject decides which pods join the mesh and computes the JSON
// patch that adds the plexus-proxy sidecar: no init container, no added
// privilege, and everything the proxy and the CNI plugin need on the pod.
package inject

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Names on pods and namespaces.
const (
	// AnnotationInject opts a namespace or pod in ("enabled") or out
	// ("disabled"); on a namespace it may be a label or an annotation, on
	// a pod either too (a pod label is what lets the webhook see pods in
	// namespaces that are not enabled).
	AnnotationInject = "plexus.dev/inject"
	// AnnotationInjected records that the injector changed the pod.
	AnnotationInjected = "plexus.dev/injected"
	// LabelProxyVersion records the injected proxy's version.
	LabelProxyVersion = "plexus.dev/proxy-version"

	ContainerName   = meshpod.ProxyContainerName
	TokenVolumeName = "plexus-identity-token"
	TokenDir        = "/var/run/secrets/plexus.dev/identity"
	TokenAudience   = "identity.plexus.dev"
	// TokenLifetime is the projected token's lifetime; the kubelet
	// rotates it at 80 % and the proxy re-reads it for every CSR.
	TokenLifetime = 24 * 3600
)

// Defaults are the proxy's resources when the pod's annotations say nothing.
type Defaults struct {
	CPURequest    resource.Quantity
	CPULimit      *resource.Quantity
	MemoryRequest resource.Quantity
	MemoryLimit   resource.Quantity
}

// DefaultResources: enough for the proxy's measured footprint (about
// 15 MB at 1,000 req/s) with headroom; no CPU limit (throttling adds
// latency).
func DefaultResources() Defaults {
	return Defaults{
		CPURequest:    resource.MustParse("10m"),
		MemoryRequest: resource.MustParse("32Mi"),
		MemoryLimit:   resource.MustParse("128Mi"),
	}
}

// Config is what every injected pod gets.
type Config struct {
	ProxyImage       string
	ProxyVersion     string
	TrustDomain      string
	ControlNamespace string
	ClusterDomain    string
	// TrustAnchorsPEM are the identity trust anchors, given to the proxy inline.
	TrustAnchorsPEM string
	Resources       Defaults
}

// Validate names the first missing or malformed field.
func (c Config) Validate() error {
	switch {
	case c.ProxyImage == "":
		return errors.New("proxy image is empty")
	case c.ProxyVersion == "":
		return errors.New("proxy version is empty")
	case c.TrustDomain == "" || c.ControlNamespace == "" || c.ClusterDomain == "":
		return errors.New("trust domain, control namespace and cluster domain must all be set")
	case !strings.Contains(c.TrustAnchorsPEM, "-----BEGIN CERTIFICATE-----"):
		return errors.New("trust anchors hold no PEM certificate")
	}
	return nil
}

func (c Config) controlAddr(svc string, port int) string {
	return fmt.Sprintf("%s.%s.svc.%s:%d", svc, c.ControlNamespace, c.ClusterDomain, port)
}

// Decision says whether a pod is injected, and why.
type Decision struct {
	Inject bool
	Reason string
}

// Decide applies the opt-in rules: a pod's own setting wins over its
// namespace's; hostNetwork pods and pods that already run the proxy are
// left alone. A value other than enabled/disabled is an error.
func Decide(pod *corev1.Pod, ns *corev1.Namespace) (Decision, error) {
	if pod.Spec.HostNetwork {
		return Decision{Reason: "pod uses the host network"}, nil
	}
	if hasProxy(pod) {
		return Decision{Reason: "pod already has a " + ContainerName + " container"}, nil
	}
	podSetting, err := setting("pod", pod.Labels, pod.Annotations)
	if err != nil {
		return Decision{}, err
	}
	switch podSetting {
	case "disabled":
		return Decision{Reason: "pod opted out with " + AnnotationInject + "=disabled"}, nil
	case "enabled":
		return Decision{Inject: true, Reason: "pod opted in"}, nil
	}
	var nsSetting string
	if ns != nil {
		if nsSetting, err = setting("namespace "+ns.Name, ns.Labels, ns.Annotations); err != nil {
			return Decision{}, err
		}
	}
	if nsSetting == "enabled" {
		return Decision{Inject: true, Reason: "namespace opted in"}, nil
	}
	return Decision{Reason: "neither the pod nor its namespace sets " + AnnotationInject + "=enabled"}, nil
}

// setting reads plexus.dev/inject from an annotation, else a label.
func setting(what string, labels, annotations map[string]string) (string, error) {
	v, ok := annotations[AnnotationInject]
	if !ok {
		v, ok = labels[AnnotationInject]
	}
	if !ok {
		return "", nil
	}
	if v != "enabled" && v != "disabled" {
		return "", fmt.Errorf("%s: %s=%q: want \"enabled\" or \"disabled\"", what, AnnotationInject, v)
	}
	return v, nil
}

func hasProxy(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == ContainerName {
				return true
			}
		}
	}
	return false
}

// Patch returns the JSON patch that injects pod (which Decide said to
// inject), with the namespace's config.plexus.dev/* values copied onto
// it. A malformed or unknown setting is an error naming the annotation
// and its value; nothing is patched then.
func Patch(pod *corev1.Pod, ns *corev1.Namespace, cfg Config) ([]Op, error) {
	var nsAnnotations map[string]string
	if ns != nil {
		nsAnnotations = ns.Annotations
	}
	annotations := merged(pod.Annotations, nsAnnotations)
	s, err := parseSettings(annotations, cfg.Resources)
	if err != nil {
		return nil, err
	}
	if err := checkProxyIDs(&pod.Spec, s.redirect.ProxyUID, s.redirect.ProxyGID); err != nil {
		return nil, err
	}
	s.inboundPorts = declaredPorts(pod)
	s.tap = !declares(pod, TapPort)
	var p patch
	proxy := cfg.container(s)
	if s.native {
		p.prepend("/spec/initContainers", len(pod.Spec.InitContainers), proxy)
	} else {
		p.prepend("/spec/containers", len(pod.Spec.Containers), proxy)
	}
	p.appendTo("/spec/volumes", len(pod.Spec.Volumes), tokenVolume())
	newAnnotations := map[string]string{AnnotationInjected: "true"}
	for k, v := range annotations {
		if _, own := pod.Annotations[k]; !own {
			newAnnotations[k] = v
		}
	}
	p.setKeys("/metadata/annotations", pod.Annotations == nil, newAnnotations)
	p.setKeys("/metadata/labels", pod.Labels == nil, podLabels(pod, cfg))
	return p.ops, nil
}

// proxyCores is the proxy's worker threads for a CPU limit: the limit
// rounded up to whole cores, 1 to 64 (without a limit the proxy runs one).
func proxyCores(limit resource.Quantity) int {
	return int(min(max((limit.MilliValue()+999)/1000, 1), 64))
}

// declaredPorts lists the TCP ports pod's containers declare, "a,b,c".
func declaredPorts(pod *corev1.Pod) string {
	var ports []int
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && p.ContainerPort > 0 && !slices.Contains(ports, int(p.ContainerPort)) {
					ports = append(ports, int(p.ContainerPort))
				}
			}
		}
	}
	slices.Sort(ports)
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = strconv.Itoa(p)
	}
	return strings.Join(out, ",")
}

// container is the plexus-proxy container for a pod with settings s.
func (c Config) container(s settings) corev1.Container {
	r := s.redirect
	uid, gid := int64(r.ProxyUID), int64(r.ProxyGID)
	yes, no := true, false
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	env := []corev1.EnvVar{
		{Name: "PLEXUS_PROXY_INBOUND_PORT", Value: strconv.Itoa(int(r.InboundPort))},
		{Name: "PLEXUS_PROXY_OUTBOUND_PORT", Value: strconv.Itoa(int(r.OutboundPort))},
		{Name: "PLEXUS_PROXY_ADMIN_PORT", Value: strconv.Itoa(int(r.AdminPort))},
		{Name: "PLEXUS_PROXY_LOG_LEVEL", Value: s.logLevel},
		{Name: "PLEXUS_PROXY_INBOUND_POLICY", Value: s.inboundPolicy},
		{Name: "PLEXUS_PROXY_IDENTITY_ADDR", Value: c.controlAddr("plexus-identity", 8080)},
		{Name: "PLEXUS_PROXY_DESTINATION_ADDR", Value: c.controlAddr("plexus-destination", 8086)},
		{Name: "PLEXUS_PROXY_CONTROL_NAMESPACE", Value: c.ControlNamespace},
		{Name: "PLEXUS_PROXY_TRUST_DOMAIN", Value: c.TrustDomain},
		{Name: "PLEXUS_PROXY_TRUST_ANCHORS", Value: c.TrustAnchorsPEM},
		{Name: "PLEXUS_PROXY_POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "PLEXUS_PROXY_POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "PLEXUS_PROXY_NODE_NAME", ValueFrom: field("spec.nodeName")},
		{Name: "PLEXUS_PROXY_SERVICE_ACCOUNT", ValueFrom: field("spec.serviceAccountName")},
		{Name: "PLEXUS_PROXY_IDENTITY_TOKEN_FILE", Value: TokenDir + "/token"},
		{Name: "PLEXUS_PROXY_REDIRECT_PROBE_PORT", Value: strconv.Itoa(RedirectProbePort)},
		// For the CNI plugin and the node agent's repair, not the proxy:
		// the redirect settings as admitted, which the pod's annotations
		// (mutable) cannot change later.
		{Name: podcontract.EnvAdmitted, Value: podcontract.EncodeAdmitted(s.admitted())},
		// For the proxy, the CNI plugin and the repair: the proxy dials the
		// application from these addresses, and only then may the plugin
		// write the pod's self-call rules.
		{Name: podcontract.EnvInboundSource, Value: podcontract.DefaultInboundSource},
		{Name: "PLEXUS_PROXY_TAP_PORT", Value: s.tapPort()},
	}
	if v, ok := s.annotations[podcontract.AnnotationOpaquePorts]; ok {
		env = append(env, corev1.EnvVar{Name: "PLEXUS_PROXY_OPAQUE_PORTS", Value: v})
	}
	if s.cpuLimit != nil {
		env = append(env, corev1.EnvVar{Name: "PLEXUS_PROXY_CORES", Value: strconv.Itoa(proxyCores(*s.cpuLimit))})
	}
	if s.inboundPorts != "" {
		env = append(env, corev1.EnvVar{Name: "PLEXUS_PROXY_INBOUND_PORTS", Value: s.inboundPorts})
	}
	admin, redirected := intstr.FromString("plexus-admin"), intstr.FromInt32(RedirectProbePort)
	probe := func(port intstr.IntOrString, path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
		}
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: s.cpuRequest, corev1.ResourceMemory: s.memRequest},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: s.memLimit},
	}
	if s.cpuLimit != nil {
		res.Limits[corev1.ResourceCPU] = *s.cpuLimit
	}
	ctr := corev1.Container{
		Name:            ContainerName,
		Image:           c.ProxyImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Env:             env,
		Ports: []corev1.ContainerPort{
			{Name: "plexus-inbound", ContainerPort: int32(r.InboundPort)},
			{Name: "plexus-admin", ContainerPort: int32(r.AdminPort)},
		},
		// Until it holds a certificate and the kubelet's probe has come
		// through the inbound redirect, the proxy is not ready, and with a
		// native sidecar the app does not start before it is.
		StartupProbe:   probe(redirected, "/ready", 1, 120),
		ReadinessProbe: probe(redirected, "/ready", 5, 3),
		LivenessProbe:  probe(admin, "/live", 10, 3),
		Resources:      res,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                &uid,
			RunAsGroup:               &gid,
			RunAsNonRoot:             &yes,
			AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem:   &yes,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: TokenVolumeName, MountPath: TokenDir, ReadOnly: true}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if s.tap {
		ctr.Ports = append(ctr.Ports, corev1.ContainerPort{Name: meshpod.TapPortName, ContainerPort: TapPort})
	}
	if s.native {
		always := corev1.ContainerRestartPolicyAlways
		ctr.RestartPolicy = &always
	}
	return ctr
}

func tokenVolume() corev1.Volume {
	exp := int64(TokenLifetime)
	return corev1.Volume{Name: TokenVolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: TokenAudience, ExpirationSeconds: &exp, Path: "token",
		}}},
	}}}
}
