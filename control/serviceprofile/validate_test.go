package serviceprofile

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func decodeYAML(t *testing.T, y string) (*ServiceProfile, error) {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("test YAML: %v", err)
	}
	return Decode(j)
}

func TestLinkerdProfileIsValid(t *testing.T) {
	y, err := os.ReadFile("testdata/linkerd-books.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := decodeYAML(t, string(y))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if err := sp.Validate("cluster.local"); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if len(sp.Spec.Routes) != 4 || sp.Spec.RetryBudget == nil || len(sp.Spec.DstOverrides) != 2 {
		t.Fatalf("decoded %+v, want 4 routes, a retry budget and 2 dstOverrides", sp.Spec)
	}
	if got := sp.Spec.DstOverrides[0].Weight.MilliValue(); got != 900 {
		t.Errorf("weight = %dm, want 900m", got)
	}
	// The same profile under another cluster domain has the wrong name.
	if err := sp.Validate("example.org"); err == nil || !strings.Contains(err.Error(), `metadata.name: Invalid value: "books.booksapp.svc.cluster.local"`) {
		t.Errorf("Validate(example.org) = %v, want the name refused", err)
	}
}

func TestDecodeStrict(t *testing.T) {
	for name, tc := range map[string]struct {
		json string
		want []string
	}{
		"unknown field in a route": {
			`{"metadata":{"name":"a.b.svc.cluster.local"},"spec":{"routes":[{"name":"r","conditon":{"method":"GET"}}]}}`,
			[]string{"spec.routes[0].conditon: unknown field"},
		},
		"unknown field deep in a condition": {
			`{"spec":{"routes":[{"name":"r","condition":{"all":[{"method":"GET"},{"path":"/x"}]}}]}}`,
			[]string{"spec.routes[0].condition.all[1].path: unknown field"},
		},
		"two unknown fields": {
			`{"spec":{"retryBudget":{"ttl":"1s","ratio":0.1},"dstOverride":[]}}`,
			[]string{"spec.retryBudget.ratio: unknown field", "spec.dstOverride: unknown field"},
		},
		"field names are case-sensitive": {
			`{"spec":{"routes":[{"Name":"r"}]}}`,
			[]string{"spec.routes[0].Name: unknown field"},
		},
		"duplicate field": {
			`{"spec":{"routes":[{"name":"a","name":"b"}]}}`,
			[]string{"spec.routes[0].name: duplicate field"},
		},
		"string for a port": {
			`{"spec":{"opaquePorts":[80, "http"]}}`,
			[]string{`spec.opaquePorts: Invalid value: "http": want an integer in the range of uint32`},
		},
		"port out of uint32": {
			`{"spec":{"opaquePorts":[-1]}}`,
			[]string{`spec.opaquePorts: Invalid value: number -1: want an integer`},
		},
		"number for a duration": {
			`{"spec":{"retryBudget":{"retryRatio":0.2,"ttl":10}}}`,
			[]string{`spec.retryBudget.ttl: Invalid value: number 10: want a string`},
		},
		"object for a list": {
			`{"spec":{"routes":{"name":"r"}}}`,
			[]string{`spec.routes: Invalid value: object: want a list`},
		},
		"bad weight": {
			`{"spec":{"dstOverrides":[{"authority":"a.b.svc.cluster.local:80","weight":1},{"authority":"c.b.svc.cluster.local:80","weight":"lots"}]}}`,
			[]string{`spec.dstOverrides[1].weight: Invalid value: "lots": quantities must match`},
		},
		"not JSON": {`{"spec":`, []string{"decoding ServiceProfile"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tc.json))
			if err == nil {
				t.Fatalf("Decode accepted %s", tc.json)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Decode error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// validName is the name each case below has unless it sets metadata.
const validName = "web.shop.svc.cluster.local"

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml string
		want []string // each must appear in the error
	}{
		"minimal": {yaml: `metadata: {name: web.shop.svc.cluster.local}`},
		"name not under the cluster domain": {
			yaml: `metadata: {name: web.shop.svc.cluster.remote}`,
			want: []string{`metadata.name: Invalid value: "web.shop.svc.cluster.remote": must be <svc>.<ns>.svc.cluster.local`},
		},
		"external FQDN name": {
			yaml: `metadata: {name: api.example.com}`,
			want: []string{`metadata.name: Invalid value: "api.example.com": must be <svc>.<ns>.svc.cluster.local, the Service's fully qualified name (Plexus uses profiles for Services only)`},
		},
		"name without namespace": {
			yaml: `metadata: {name: web.svc.cluster.local}`,
			want: []string{`metadata.name: Invalid value: "web.svc.cluster.local"`},
		},
		"name with bad service label": {
			yaml: `metadata: {name: 1web.shop.svc.cluster.local}`,
			want: []string{`metadata.name: Invalid value: "1web.shop.svc.cluster.local": Service name "1web"`},
		},
		"name with bad namespace label": {
			yaml: `metadata: {name: web.Shop.svc.cluster.local}`,
			want: []string{`namespace "Shop"`},
		},
		"route without name or condition": {
			yaml: `spec: {routes: [{}]}`,
			want: []string{"spec.routes[0].name: Required value", "spec.routes[0].condition: Required value"},
		},
		"duplicate route names": {
			yaml: `spec: {routes: [{name: a, condition: {method: GET}}, {name: b, condition: {method: GET}}, {name: a, condition: {method: PUT}}]}`,
			want: []string{`spec.routes[2].name: Invalid value: "a": already the name of routes[0]`},
		},
		"empty condition": {
			yaml: `spec: {routes: [{name: a, condition: {}}]}`,
			want: []string{"spec.routes[0].condition: Required value: one of method, pathRegex, all, any or not"},
		},
		"empty condition deep down": {
			yaml: `spec: {routes: [{name: a, condition: {any: [{method: GET}, {not: {}}]}}]}`,
			want: []string{"spec.routes[0].condition.any[1].not: Required value"},
		},
		"empty all": {
			yaml: `spec: {routes: [{name: a, condition: {all: []}}]}`,
			want: []string{"spec.routes[0].condition.all: Required value: may not be an empty list"},
		},
		"bad regex": {
			yaml: `spec: {routes: [{name: a, condition: {pathRegex: "/books/("}}]}`,
			want: []string{`spec.routes[0].condition.pathRegex: Invalid value: "/books/(": error parsing regexp: missing closing )`},
		},
		"regex RE2 refuses": {
			yaml: `spec: {routes: [{name: a, condition: {all: [{pathRegex: "/(?=x)"}]}}]}`,
			want: []string{`spec.routes[0].condition.all[0].pathRegex: Invalid value: "/(?=x)": error parsing regexp: invalid or unsupported Perl syntax`},
		},
		"bad method": {
			yaml: `spec: {routes: [{name: a, condition: {method: "GET /"}}]}`,
			want: []string{`spec.routes[0].condition.method: Invalid value: "GET /": must be an HTTP method token`},
		},
		"bad timeout": {
			yaml: `spec: {routes: [{name: a, condition: {method: GET}, timeout: 5x}]}`,
			want: []string{`spec.routes[0].timeout: Invalid value: "5x": time: unknown unit "x"`},
		},
		"zero timeout": {
			yaml: `spec: {routes: [{name: a, condition: {method: GET}, timeout: 0s}]}`,
			want: []string{`spec.routes[0].timeout: Invalid value: "0s": must be above zero`},
		},
		"response class without condition": {
			yaml: `spec: {routes: [{name: a, condition: {method: GET}, responseClasses: [{isFailure: true}]}]}`,
			want: []string{"spec.routes[0].responseClasses[0].condition: Required value"},
		},
		"status out of range and reversed": {
			yaml: `spec: {routes: [{name: a, condition: {method: GET}, responseClasses: [{condition: {status: {min: 99}}}, {condition: {not: {status: {min: 503, max: 500}}}}, {condition: {any: [{status: {max: 600}}]}}]}]}`,
			want: []string{
				"spec.routes[0].responseClasses[0].condition.status.min: Invalid value: 99",
				`spec.routes[0].responseClasses[1].condition.not.status: Invalid value: "min 503, max 500": min must not be above max`,
				"spec.routes[0].responseClasses[2].condition.any[0].status.max: Invalid value: 600",
			},
		},
		"negative retry ratio, no ttl": {
			yaml: `spec: {retryBudget: {retryRatio: -0.5, minRetriesPerSecond: 1}}`,
			want: []string{"spec.retryBudget.retryRatio: Invalid value: -0.5: must not be negative", "spec.retryBudget.ttl: Required value"},
		},
		"bad ttl": {
			yaml: `spec: {retryBudget: {retryRatio: 0.2, minRetriesPerSecond: 1, ttl: "-10s"}}`,
			want: []string{`spec.retryBudget.ttl: Invalid value: "-10s": must be above zero`},
		},
		"authority without port": {
			yaml: `spec: {dstOverrides: [{authority: web.shop.svc.cluster.local, weight: 1}]}`,
			want: []string{`spec.dstOverrides[0].authority: Invalid value: "web.shop.svc.cluster.local": must be host:port`},
		},
		"authority port out of range": {
			yaml: `spec: {dstOverrides: [{authority: "web.shop.svc.cluster.local:65536", weight: 1}, {authority: "10.0.0.1:0", weight: 1}]}`,
			want: []string{
				`spec.dstOverrides[0].authority: Invalid value: "web.shop.svc.cluster.local:65536": port "65536" must be in 1..65535`,
				`spec.dstOverrides[1].authority: Invalid value: "10.0.0.1:0": port "0" must be in 1..65535`,
			},
		},
		"authority bad host": {
			yaml: `spec: {dstOverrides: [{authority: "Web_1:80", weight: 1}]}`,
			want: []string{`spec.dstOverrides[0].authority: Invalid value: "Web_1:80": host "Web_1"`},
		},
		"negative weight": {
			yaml: `spec: {dstOverrides: [{authority: "a.shop.svc.cluster.local:80", weight: -1}, {authority: "b.shop.svc.cluster.local:80", weight: 1}]}`,
			want: []string{`spec.dstOverrides[0].weight: Invalid value: "-1": must not be negative`},
		},
		"zero weights": {
			yaml: `spec: {dstOverrides: [{authority: "a.shop.svc.cluster.local:80", weight: 0}, {authority: "b.shop.svc.cluster.local:80", weight: 0m}]}`,
			want: []string{`spec.dstOverrides: Invalid value: "weights 0, 0": the weights must sum to more than zero`},
		},
		"opaque port out of range": {
			yaml: `spec: {opaquePorts: [80, 0, 70000]}`,
			want: []string{"spec.opaquePorts[1]: Invalid value: 0", "spec.opaquePorts[2]: Invalid value: 70000"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			y := tc.yaml
			if !strings.HasPrefix(y, "metadata:") {
				y = "metadata: {name: " + validName + "}\n" + y
			}
			sp, err := decodeYAML(t, y)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			err = sp.Validate("cluster.local")
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %s", y)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error\n%s\ndoes not contain %q", err, w)
				}
			}
			if n, m := strings.Count(err.Error(), "\n")+1, len(tc.want); n != m {
				t.Errorf("Validate reported %d problems, want %d:\n%s", n, m, err)
			}
		})
	}
}

func TestValidateNeedsClusterDomain(t *testing.T) {
	sp := &ServiceProfile{}
	sp.Name = validName
	if err := sp.Validate(""); err == nil {
		t.Error("Validate(\"\") accepted a profile with no cluster domain to check")
	}
}
