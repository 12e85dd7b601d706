package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// value is one chart value: its path under .Values, its default (install's
// default, or deploy/'s for resources), what it does, and its JSON schema.
type value struct {
	path   string
	def    any
	doc    string
	schema object
}

// Schemas of the kinds of value.
var (
	dnsName = object{"type": "string", "minLength": 1, "maxLength": 253,
		"pattern": `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`}
	// hostDir: clean absolute paths, no "." or ".." segment (hidden
	// directories allowed).
	hostDir = object{"type": "string", "pattern": `^(/([A-Za-z0-9_-][A-Za-z0-9._-]*|\.[A-Za-z0-9_-][A-Za-z0-9._-]*|\.\.[A-Za-z0-9._-]+))+$`}
	boolean = object{"type": "boolean"}
	// registry: host[:port][/path], as an image reference has it.
	registry = object{"type": "string", "minLength": 1, "pattern": `^[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`}
	imageTag = object{"type": "string", "pattern": `^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`}
	pem      = object{"type": "string", "pattern": `^(|-----BEGIN [\s\S]*)$`}
	// resourcesSchema: a container's requests and limits.
	resourcesSchema = object{
		"type":                 "object",
		"additionalProperties": false,
		"properties": object{
			"requests": quantities,
			"limits":   quantities,
		},
	}
	quantities = object{
		"type":                 "object",
		"additionalProperties": false,
		"properties": object{
			"cpu":               quantity,
			"memory":            quantity,
			"ephemeral-storage": quantity,
		},
	}
	quantity = object{"type": []any{"string", "number"}}
)

func imageValues() []value {
	def := DefaultConfig()
	return []value{
		{"image.registry", def.ImageRegistry, "Registry and path of Plexus's images (install --image-registry).", registry},
		{"image.tag", def.Version, "Tag of Plexus's images, and the proxy version injected pods record (install --version).", imageTag},
	}
}

func crdsValues() []value {
	return []value{
		{"nodeImageMode", false, "The CNI plugin is baked into the node images and the plexus-node chart is not installed: plexus-system then enforces Pod Security \"restricted\" instead of \"privileged\" (install --node-image-mode).", boolean},
		{"gatewayAPI.installCRDs", true, "Install the Gateway API CRDs Plexus needs (HTTPRoute, GRPCRoute; standard channel). Set false where the cluster already has them (Helm refuses to take over CRDs another release or tool installed, and so never replaces them).", boolean},
	}
}

func controlPlaneValues(res map[string]any) []value {
	def := DefaultConfig()
	return withImagesAndResources(res,
		value{"identity.trustDomain", def.TrustDomain, "SPIFFE trust domain of the mesh (install --trust-domain).", dnsName},
		value{"identity.trustAnchorsPEM", "", "PEM trust anchors. Empty (with the issuer values empty): identity generates a trust anchor and issuer once, into the Secret plexus-identity-issuer and the ConfigMap plexus-identity-trust-anchors, and every upgrade keeps them.", pem},
		value{"identity.issuer.tls.crtPEM", "", "PEM issuer certificate signed by a trust anchor (install --identity-issuer-certificate-file).", pem},
		value{"identity.issuer.tls.keyPEM", "", "PEM issuer private key (install --identity-issuer-key-file).", pem},
		value{"identity.issuer.externalSecret", false, "Another tool (cert-manager, say) writes the issuer Secret plexus-identity-issuer (ca.crt, tls.crt, tls.key): the chart renders only the trust anchors ConfigMap, from identity.trustAnchorsPEM.", boolean},
		value{"clusterDomain", def.ClusterDomain, "The cluster's DNS domain (install --cluster-domain).", dnsName},
		value{"clusterNetworks", def.ClusterNetworks, "The cluster's pod and service networks, comma-separated CIDRs, for the cluster-* inbound policies (install --cluster-networks).",
			object{"type": "string", "pattern": `^[0-9a-fA-F.:]+/[0-9]{1,3}(, *[0-9a-fA-F.:]+/[0-9]{1,3})*$`}},
		value{"proxy.defaultInboundPolicy", def.DefaultInboundPolicy, "Who may reach meshed pods no Server covers (install --default-inbound-policy); a namespace or pod annotation config.plexus.dev/default-inbound-policy overrides it.",
			object{"type": "string", "enum": policyEnum()}},
		value{"ha.enabled", false, fmt.Sprintf("Run %d replicas of each control-plane Deployment, spread over nodes, each with a PodDisruptionBudget (install --ha).", HAReplicas), boolean})
}

func nodeValues(res map[string]any) []value {
	def := DefaultConfig()
	return withImagesAndResources(res,
		value{"cni.binDir", def.CNIBinDir, "Host directory of the CNI plugin binaries (install --cni-bin-dir).", hostDir},
		value{"cni.confDir", def.CNIConfDir, "Host directory of the CNI configuration (install --cni-conf-dir).", hostDir})
}

func vizValues(res map[string]any) []value {
	def := DefaultConfig()
	return withImagesAndResources(res,
		value{"identity.trustDomain", def.TrustDomain, "SPIFFE trust domain of the mesh, as given to the control plane.", dnsName},
		value{"clusterDomain", def.ClusterDomain, "The cluster's DNS domain, as given to the control plane.", dnsName})
}

// withImagesAndResources are a chart's values: the images, its own, and the
// resources of its containers (res).
func withImagesAndResources(res map[string]any, own ...value) []value {
	return append(append(imageValues(), own...), resourceValues(res)...)
}

func resourceValues(res map[string]any) []value {
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var vs []value
	for _, k := range keys {
		vs = append(vs, value{k + ".resources", res[k], "Requests and limits of the " + k + " container.", resourcesSchema})
	}
	return vs
}

func policyEnum() []any {
	var e []any
	for _, p := range policyv1alpha1.AccessPolicies() {
		e = append(e, string(p))
	}
	return e
}

// addValues writes a chart's values.yaml and values.schema.json, after
// checking that its templates use no value the chart does not define.
func addValues(files map[string][]byte, chart string, vs []value) error {
	defined := map[string]bool{}
	for _, v := range vs {
		defined[v.path] = true
	}
	for p, b := range files {
		if !strings.HasPrefix(p, chart+"/templates/") {
			continue
		}
		for _, m := range valueRef.FindAllSubmatch(b, -1) {
			ref := string(m[1])
			if !defined[ref] && !slices.ContainsFunc(vs, func(v value) bool { return strings.HasPrefix(v.path, ref+".") }) {
				return fmt.Errorf("%s uses .Values.%s, which %s does not define", p, ref, chart)
			}
		}
	}
	y, err := valuesYAML(chart, vs)
	if err != nil {
		return err
	}
	files[path.Join(chart, "values.yaml")] = y
	s, err := json.MarshalIndent(valuesSchema(chart, vs), "", "  ")
	if err != nil {
		return err
	}
	files[path.Join(chart, "values.schema.json")] = append(s, '\n')
	return nil
}

var valueRef = regexp.MustCompile(`\.Values\.([A-Za-z0-9_.]*[A-Za-z0-9_])`)

// valuesYAML writes the defaults with their docs as comments, nested by
// path, each map where its first value is.
func valuesYAML(chart string, vs []value) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Values of the %s chart (values.schema.json checks them).\n", chart)
	b.WriteString("# Generated by `make charts` from deploy/ and control/cli/install: do not edit.\n")
	root := &valueNode{}
	for i := range vs {
		root.add(strings.Split(vs[i].path, "."), &vs[i])
	}
	for _, c := range root.children {
		b.WriteString("\n")
		if err := c.write(&b, 0); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// valueNode is a map of values, or one value, in the order first given.
type valueNode struct {
	key      string
	v        *value
	children []*valueNode
}

func (n *valueNode) add(keys []string, v *value) {
	for _, c := range n.children {
		if c.key == keys[0] && c.v == nil && len(keys) > 1 {
			c.add(keys[1:], v)
			return
		}
	}
	c := &valueNode{key: keys[0]}
	n.children = append(n.children, c)
	if len(keys) == 1 {
		c.v = v
		return
	}
	c.add(keys[1:], v)
}

func (n *valueNode) write(b *bytes.Buffer, depth int) error {
	ind := indent(depth)
	if n.v == nil {
		fmt.Fprintf(b, "%s%s:\n", ind, n.key)
		for _, c := range n.children {
			if err := c.write(b, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(b, "%s# %s\n", ind, n.v.doc)
	if m, ok := n.v.def.(object); ok {
		y, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s%s:\n", ind, n.key)
		for _, l := range lines(y) {
			fmt.Fprintf(b, "%s  %s\n", ind, l)
		}
		return nil
	}
	j, err := json.Marshal(n.v.def)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "%s%s: %s\n", ind, n.key, j)
	return nil
}

func indent(n int) string { return strings.Repeat("  ", n) }

// valuesSchema is the JSON schema of the values: every map closed to keys the
// chart does not know, so a typo is an error naming the key.
func valuesSchema(chart string, vs []value) object {
	root := object{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"title":                "Values of the " + chart + " chart",
		"type":                 "object",
		"additionalProperties": false,
		"properties":           object{},
	}
	for _, v := range vs {
		keys := strings.Split(v.path, ".")
		cur := root
		for _, k := range keys[:len(keys)-1] {
			props := cur["properties"].(object)
			next, ok := props[k].(object)
			if !ok {
				next = object{"type": "object", "additionalProperties": false, "properties": object{}}
				props[k] = next
			}
			cur = next
		}
		leaf := object{"description": v.doc}
		for k, s := range v.schema {
			leaf[k] = s
		}
		cur["properties"].(object)[keys[len(keys)-1]] = leaf
	}
	return root
}
