// Package profile writes a ready-to-edit ServiceProfile for a Service
// (plexusctl profile --template): commented example routes, response
// classes, retries, a timeout and a retry budget, which decode and
// validate as control/serviceprofile's types; the traffic split
// (dstOverrides) is left commented out.
package profile

import (
	"fmt"
	"io"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
)

// Params names the Service.
type Params struct {
	Service, Namespace, ClusterDomain string
}

// Name is the profile's name, <svc>.<ns>.svc.<cluster-domain>.
func (p Params) Name() string {
	return p.Service + "." + p.Namespace + ".svc." + p.ClusterDomain
}

// DstOverridesExample is the traffic split the template shows commented
// out: uncommented, it is valid YAML under spec.
const DstOverridesExample = `dstOverrides:
- authority: {{.Service}}.{{.Namespace}}.svc.{{.ClusterDomain}}:80
  weight: 900m
- authority: {{.Service}}-canary.{{.Namespace}}.svc.{{.ClusterDomain}}:80
  weight: 100m
`

const text = `# ServiceProfile for the Service {{.Namespace}}/{{.Service}}: edit it, then
# kubectl apply -f it. Here, in the Service's namespace, it applies to every
# client; a copy in a client's namespace applies to that namespace's clients
# only. It wins over HTTPRoutes for the Service. apiVersion aside, the spec
# is Linkerd's linkerd.io/v1alpha2, so Linkerd profiles convert as they are.
apiVersion: ` + serviceprofile.APIVersion + `
kind: ` + serviceprofile.Kind + `
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
spec:
  # Routes are tried in order; the first whose condition matches takes the
  # request. Unmatched requests take the default route. plexusctl routes
  # shows traffic per route name.
  routes:
  - name: GET /books/{id}
    # Several fields in one condition must all hold. pathRegex is RE2,
    # matched against the whole path.
    condition:
      method: GET
      pathRegex: /books/[^/]+
    # Which responses count as failures (for success rates and retries).
    # Without response classes, 5xx responses are failures.
    responseClasses:
    - condition:
        status:
          min: 500
          max: 599
      isFailure: true
    # A retryable route's failed requests are retried, within the
    # retryBudget below. Mark only routes that are safe to repeat.
    isRetryable: true
    # How long a request of this route may take (a Go duration).
    timeout: 300ms
  - name: POST or PUT /books
    # all, any and not combine conditions.
    condition:
      all:
      - pathRegex: /books
      - any:
        - method: POST
        - method: PUT
    # A range with one bound is open on the other side; not inverts.
    responseClasses:
    - condition:
        all:
        - status:
            min: 400
        - not:
            status:
              min: 404
              max: 404
      isFailure: true
    timeout: 1s
  # Retries may add at most retryRatio of the requests, plus
  # minRetriesPerSecond, counted over ttl.
  retryBudget:
    retryRatio: 0.2
    minRetriesPerSecond: 10
    ttl: 10s
  # To split the Service's traffic between Services by weight, uncomment
  # (authorities are <svc>.<ns>.svc.<cluster-domain>:<port>):
{{comment .}}`

var dstTmpl = template.Must(template.New("dst").Parse(DstOverridesExample))

var tmpl = template.Must(template.New("profile").Funcs(template.FuncMap{
	// comment renders DstOverridesExample commented out under spec.
	"comment": func(p Params) (string, error) {
		var b strings.Builder
		if err := dstTmpl.Execute(&b, p); err != nil {
			return "", err
		}
		return "  # " + strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", "\n  # ") + "\n", nil
	},
}).Parse(text))

// Template writes the ServiceProfile template for p. It refuses names
// that would make the profile invalid (serviceprofile.Validate).
func Template(w io.Writer, p Params) error {
	var b strings.Builder
	if err := tmpl.Execute(&b, p); err != nil {
		return fmt.Errorf("profile template: %w", err)
	}
	if err := check(b.String(), p.ClusterDomain); err != nil {
		return fmt.Errorf("profile template for %s: %w", p.Name(), err)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// check decodes a profile strictly and validates it.
func check(text, clusterDomain string) error {
	j, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		return err
	}
	sp, err := serviceprofile.Decode(j)
	if err != nil {
		return err
	}
	return sp.Validate(clusterDomain)
}
