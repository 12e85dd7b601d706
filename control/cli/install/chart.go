package install

import (
	"bytes"
	"fmt"
	"maps"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The Helm charts in deploy/charts (ARCHITECTURE.md §11) are generated from
// deploy/ by the same code that renders `plexusctl install`, so that the
// two cannot drift: Charts customizes deploy/'s objects with a Config
// whose settings are tokens (chartConfig), marshals them, and turns each
// token into the template expression of its value. A setting that changes
// structure (--ha, --node-image-mode) is rendered both ways and the lines
// that differ are wrapped in {{ if }} … {{ else }} … {{ end }}. `make
// charts` writes the result; TestChartsUpToDate fails when deploy/ or this
// code changed and the charts were not regenerated, and the helm tests
// render the charts with real helm and compare their objects with
// Render's.

// ChartsDir is where the charts live, under deploy/.
const ChartsDir = "charts"

// Chart names.
const (
	ChartCRDs         = "plexus-crds"
	ChartControlPlane = "plexus-control-plane"
	ChartNode         = "plexus-node"
	ChartViz          = "plexus-viz"
)

// tokens stand for chart values while deploy/ is customized; each is
// replaced by its template expression in the marshalled YAML.
var tokens = map[string]string{
	"PLEXUSVALUETRUSTDOMAIN":     "{{ .Values.identity.trustDomain }}",
	"PLEXUSVALUECLUSTERDOMAIN":   "{{ .Values.clusterDomain }}",
	"PLEXUSVALUECNIBINDIR":       `{{ trimPrefix "/" .Values.cni.binDir }}`,
	"PLEXUSVALUECNICONFDIR":      `{{ trimPrefix "/" .Values.cni.confDir }}`,
	"PLEXUSVALUEREGISTRY":        "{{ .Values.image.registry }}",
	"PLEXUSVALUEVERSION":         "{{ .Values.image.tag }}",
	"PLEXUSVALUEINBOUNDPOLICY":   "{{ .Values.proxy.defaultInboundPolicy }}",
	"PLEXUSVALUECLUSTERNETWORKS": "{{ .Values.clusterNetworks }}",
	"PLEXUSVALUEANCHORSB64":      "{{ .Values.identity.trustAnchorsPEM | b64enc }}",
	"PLEXUSVALUEISSUERCERTB64":   "{{ .Values.identity.issuer.tls.crtPEM | b64enc }}",
	"PLEXUSVALUEISSUERKEYB64":    "{{ .Values.identity.issuer.tls.keyPEM | b64enc }}",
	"PLEXUSVALUEANCHORSPEM":      "{{ .Values.identity.trustAnchorsPEM | toJson }}",
	"PLEXUSVALUEMANAGEDBY":       "{{ .Release.Service }}",
}

// managedByToken marks what a chart renders as managed by Helm
// ({{ .Release.Service }}), where install marks ManagedByInstall.
const managedByToken = "PLEXUSVALUEMANAGEDBY"

// chartConfig is the Config whose settings are tokens.
func chartConfig() Config {
	return Config{
		TrustDomain:          "PLEXUSVALUETRUSTDOMAIN",
		ClusterDomain:        "PLEXUSVALUECLUSTERDOMAIN",
		CNIBinDir:            "/PLEXUSVALUECNIBINDIR",
		CNIConfDir:           "/PLEXUSVALUECNICONFDIR",
		ImageRegistry:        "PLEXUSVALUEREGISTRY",
		Version:              "PLEXUSVALUEVERSION",
		DefaultInboundPolicy: "PLEXUSVALUEINBOUNDPOLICY",
		ClusterNetworks:      "PLEXUSVALUECLUSTERNETWORKS",
	}
}

// resourcesToken marks a container's resources, replaced by the
// workload's resources value (valuesKey).
const resourcesToken = "PLEXUSRESOURCES"

// Conditions of the structural settings.
const (
	condHA             = ".Values.ha.enabled"
	condNodeImageMode  = ".Values.nodeImageMode"
	condGatewayAPICRDs = ".Values.gatewayAPI.installCRDs"
	// condIssuerGiven: the chart was given the trust anchors, so identity
	// does not generate them.
	condIssuerGiven = ".Values.identity.trustAnchorsPEM"
	// condIssuerSecret: the chart renders the issuer Secret from values
	// (else an external one, e.g. cert-manager's, is used).
	condIssuerSecret = "and .Values.identity.trustAnchorsPEM (not .Values.identity.issuer.externalSecret)"
)

// HelmResourcePolicy is the annotation that keeps an object when helm
// uninstall or upgrade would delete it; the charts' Gateway API CRDs and
// identity objects carry it ("keep"), a way the charts' objects differ
// from install's (with the managed-by label).
const HelmResourcePolicy = "helm.sh/resource-policy"

// GenerateIssuerFlag makes identity create the trust anchor and issuer
// when its Secret is absent (a chart installed without them).
const GenerateIssuerFlag = "--generate-issuer"

// Charts returns the generated files of deploy/charts, by path under it:
// each chart's templates, values.yaml and values.schema.json. Chart.yaml
// and the READMEs are written by hand.
func (r Renderer) Charts() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, c := range []func(map[string][]byte) error{
		r.crdsChart, r.controlPlaneChart, r.plainChart("plexus-node", ChartNode, nodeValues), r.plainChart("plexus-viz", ChartViz, vizValues)} {
		if err := c(files); err != nil {
			return nil, fmt.Errorf("charts: %w", err)
		}
	}
	return files, nil
}

func (r Renderer) crdsChart(files map[string][]byte) error {
	cfg := chartConfig()
	ns, err := variants(condNodeImageMode, namespace(cfg), func(o object) error {
		restricted := cfg
		restricted.NodeImageMode = true
		for k, v := range namespace(restricted) {
			o[k] = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	files[template(ChartCRDs, "namespace.yaml")] = ns
	crds, err := load(r.Manifests, "crds")
	if err != nil {
		return err
	}
	if err := addObjects(files, ChartCRDs, crds, ""); err != nil {
		return err
	}
	gateway, err := load(r.Manifests, gatewayAPIDir)
	if err != nil {
		return err
	}
	// Shared with other controllers: helm uninstall leaves them, as
	// plexusctl uninstall does (deleting one deletes every route of its kind).
	for _, o := range gateway {
		keepOnUninstall(o)
	}
	if err := addObjects(files, ChartCRDs, gateway, condGatewayAPICRDs); err != nil {
		return err
	}
	return addValues(files, ChartCRDs, crdsValues())
}

func (r Renderer) controlPlaneChart(files map[string][]byte) error {
	control, res, err := r.loadTokenized("plexus-control")
	if err != nil {
		return err
	}
	for _, o := range control {
		var b []byte
		switch {
		case kind(o) == "Deployment" && name(o) == identityDeployment:
			b, err = variants("not "+condIssuerGiven, o, func(o object) error { return withArg(o, GenerateIssuerFlag) })
			if err == nil {
				b, err = nest(condHA, b, o, func(o object) error { _, err := makeHA(o); return err })
			}
		case kind(o) == "Deployment":
			b, err = variants(condHA, o, func(o object) error { _, err := makeHA(o); return err })
		default:
			b, err = marshal(o)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", describe(o), err)
		}
		files[template(ChartControlPlane, fileName(o))] = b
		if kind(o) == "Deployment" {
			pdb, err := makeHA(runtime.DeepCopyJSON(o))
			if err != nil {
				return fmt.Errorf("%s: %w", describe(o), err)
			}
			if files[template(ChartControlPlane, fileName(pdb))], err = conditional(condHA, pdb); err != nil {
				return err
			}
		}
	}
	ids := identityObjectsOf("PLEXUSVALUEANCHORSB64", "PLEXUSVALUEISSUERCERTB64", "PLEXUSVALUEISSUERKEYB64", "PLEXUSVALUEANCHORSPEM")
	// An upgrade that drops the identity values (helm upgrade --set …
	// without --reuse-values) must not delete the anchors: identity would
	// make new ones and every proxy would stop trusting every other.
	for _, o := range ids {
		keepOnUninstall(o)
	}
	if files[template(ChartControlPlane, "identity-issuer-secret.yaml")], err = conditional(condIssuerSecret, ids[0]); err != nil {
		return err
	}
	if files[template(ChartControlPlane, "identity-trust-anchors.yaml")], err = conditional(condIssuerGiven, ids[1]); err != nil {
		return err
	}
	var gen []byte
	for i, o := range issuerGenerationRBAC() {
		b, err := marshal(o)
		if err != nil {
			return err
		}
		if i > 0 {
			gen = append(gen, "---\n"...)
		}
		gen = append(gen, b...)
	}
	files[template(ChartControlPlane, "identity-generate-issuer-rbac.yaml")] = wrap("not "+condIssuerGiven, gen)
	files[template(ChartControlPlane, "identity-values-check.yaml")] = []byte(identityValuesCheck)
	return addValues(files, ChartControlPlane, controlPlaneValues(res))
}

// identityValuesCheck fails a render whose identity values go only half
// way.
const identityValuesCheck = `{{- $id := .Values.identity }}
{{- if and (not $id.trustAnchorsPEM) (or $id.issuer.tls.crtPEM $id.issuer.tls.keyPEM $id.issuer.externalSecret) }}
{{- fail "identity.trustAnchorsPEM is empty: give it with identity.issuer.tls.crtPEM and keyPEM (or identity.issuer.externalSecret), or none of them to let identity generate the trust anchor and issuer" }}
{{- end }}
{{- if and $id.trustAnchorsPEM (not $id.issuer.externalSecret) (not (and $id.issuer.tls.crtPEM $id.issuer.tls.keyPEM)) }}
{{- fail "identity.trustAnchorsPEM is set: give identity.issuer.tls.crtPEM and identity.issuer.tls.keyPEM too, or set identity.issuer.externalSecret when another tool writes the issuer Secret" }}
{{- end }}
`

// plainChart renders the chart of one tokenized kustomization directory
// (the node agent's, viz's): its objects, and values with their schema.
func (r Renderer) plainChart(dir, chart string, values func(res map[string]any) []value) func(map[string][]byte) error {
	return func(files map[string][]byte) error {
		objs, res, err := r.loadTokenized(dir)
		if err != nil {
			return err
		}
		if err := addObjects(files, chart, objs, ""); err != nil {
			return err
		}
		return addValues(files, chart, values(res))
	}
}

const identityDeployment = "plexus-identity"

// keepOnUninstall annotates o with HelmResourcePolicy keep.
func keepOnUninstall(o object) {
	meta, _ := o["metadata"].(object)
	ann, _ := meta["annotations"].(object)
	if ann == nil {
		ann = object{}
		meta["annotations"] = ann
	}
	ann[HelmResourcePolicy] = "keep"
}

// loadTokenized loads dir's objects customized with chartConfig and each
// workload's resources tokenized; it returns those resources, by values
// key, as the defaults of their values.
func (r Renderer) loadTokenized(dir string) ([]object, map[string]any, error) {
	objs, err := load(r.Manifests, dir)
	if err != nil {
		return nil, nil, err
	}
	res := map[string]any{}
	for _, o := range objs {
		if err := customize(o, chartConfig()); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", describe(o), err)
		}
		if err := tokenizeResources(o, res); err != nil {
			return nil, nil, err
		}
	}
	return objs, res, nil
}

// addObjects writes each object to its own template, under cond if given.
func addObjects(files map[string][]byte, chart string, objs []object, cond string) error {
	for _, o := range objs {
		b, err := marshal(o)
		if err != nil {
			return fmt.Errorf("%s: %w", describe(o), err)
		}
		if cond != "" {
			b = wrap(cond, b)
		}
		p := template(chart, fileName(o))
		if _, dup := files[p]; dup {
			// the same kind and name in two namespaces
			meta, _ := o["metadata"].(object)
			p = template(chart, strings.ToLower(kind(o))+"-"+str(meta["namespace"])+"-"+name(o)+".yaml")
		}
		if _, dup := files[p]; dup {
			return fmt.Errorf("two objects make %s", p)
		}
		files[p] = b
	}
	return nil
}

func template(chart, file string) string { return path.Join(chart, "templates", file) }

// fileName names an object's template: kind-name.yaml, lowercase.
func fileName(o object) string {
	return strings.ToLower(kind(o)) + "-" + name(o) + ".yaml"
}

func name(o object) string {
	meta, _ := o["metadata"].(object)
	return str(meta["name"])
}

// valuesKey is the values key of a workload's settings: its name without
// "plexus-", in camelCase (plexus-sp-validator: spValidator).
func valuesKey(workload string) string {
	parts := strings.Split(strings.TrimPrefix(workload, "plexus-"), "-")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// tokenizeResources replaces the resources of a workload's only
// container by resourcesToken, keeping them in res under the workload's
// values key as the value's default.
func tokenizeResources(o object, res map[string]any) error {
	switch kind(o) {
	case "Deployment", "DaemonSet", "StatefulSet":
	default:
		return nil
	}
	podSpec, err := mapAt(o, "spec", "template", "spec")
	if err != nil {
		return err
	}
	cs, _ := podSpec["containers"].([]any)
	if len(cs) != 1 {
		return fmt.Errorf("%s: want one container, have %d", describe(o), len(cs))
	}
	c, _ := cs[0].(object)
	r, ok := c["resources"]
	if !ok {
		return fmt.Errorf("%s: its container sets no resources", describe(o))
	}
	res[valuesKey(name(o))] = r
	c["resources"] = resourcesToken + valuesKey(name(o))
	return nil
}

// withArg appends a to the args of the workload's only container.
func withArg(o object, a string) error {
	podSpec, err := mapAt(o, "spec", "template", "spec")
	if err != nil {
		return err
	}
	cs, _ := podSpec["containers"].([]any)
	c, _ := cs[0].(object)
	args, _ := c["args"].([]any)
	c["args"] = append(args, a)
	return nil
}

// marshal writes o as a template: literal "{{" escaped, tokens turned into
// their expressions.
func marshal(o object) ([]byte, error) {
	if meta, _ := o["metadata"].(object); meta != nil && !isGatewayAPICRD(o) && !isViz(o) {
		// o itself is left as it was: copies of the maps on the way.
		o, meta = maps.Clone(o), maps.Clone(meta)
		o["metadata"] = meta
		if labels, ok := meta["labels"].(object); ok {
			meta["labels"] = maps.Clone(labels)
		}
		markManaged(o, managedByToken)
	}
	b, err := yaml.Marshal(o)
	if err != nil {
		return nil, err
	}
	b = bytes.ReplaceAll(b, []byte("{{"), []byte(`{{ "{{" }}`))
	b = resourcesLine.ReplaceAllFunc(b, func(line []byte) []byte {
		m := resourcesLine.FindSubmatch(line)
		indent := len(m[1])
		return fmt.Appendf(nil, "%sresources:\n{{- toYaml .Values.%s.resources | nindent %d }}", m[1], m[2], indent+2)
	})
	for tok, expr := range tokens {
		b = bytes.ReplaceAll(b, []byte(tok), []byte(expr))
	}
	if bytes.Contains(b, []byte("PLEXUSVALUE")) || bytes.Contains(b, []byte(resourcesToken)) {
		return nil, fmt.Errorf("%s: a token was left in the template", describe(o))
	}
	return b, nil
}

var resourcesLine = regexp.MustCompile(`(?m)^( *)resources: ` + resourcesToken + `([A-Za-z]+)$`)

// conditional writes o under cond.
func conditional(cond string, o object) ([]byte, error) {
	b, err := marshal(o)
	if err != nil {
		return nil, err
	}
	return wrap(cond, b), nil
}

// isViz: an object of the viz extension, which `plexusctl viz install`
// renders as written (no managed-by label).
func isViz(o object) bool {
	meta, _ := o["metadata"].(object)
	labels, _ := meta["labels"].(object)
	return labels["app.kubernetes.io/part-of"] == "plexus-viz" || str(meta["namespace"]) == "plexus-viz" || str(meta["name"]) == "plexus-viz"
}

func wrap(cond string, b []byte) []byte {
	return fmt.Appendf(nil, "{{- if %s }}\n%s{{- end }}\n", cond, b)
}
