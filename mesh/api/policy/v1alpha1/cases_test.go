package policyv1alpha1

// crdCase is an object the API server must accept (path "") or refuse
// with an error naming path (indices included) and containing msg.
// TestCasesCoverEveryRule checks that every CEL rule and every enum of
// the CRDs has a refused case; TestCRDsAgainstAPIServer runs them.
type crdCase struct {
	name string
	kind string
	spec string // YAML
	path string
	msg  string
}

// Specs the refused cases start from.
const (
	serverTarget = "targetRef: {group: policy.plexus.dev, kind: Server, name: web}\n"
	noAuthn      = "requiredAuthenticationRefs: []\n"
	onlyTotal    = "total: {requestsPerSecond: 100}\n"
)

// Messages of the schema (OpenAPI) checks, as the API server words them.
const (
	required    = "Required value"
	unsupported = "Unsupported value"
	atLeastOne  = "should have at least 1 items"
	atLeast1    = "should be greater than or equal to 1"
	noPattern   = "should match"
	tooShort    = "should be at least 1 chars long"
)

var crdCases = []crdCase{
	// Server
	{name: "port number", kind: ServerKind, spec: "podSelector: {matchLabels: {app: web}}\nport: 8080"},
	{name: "port name", kind: ServerKind, spec: "podSelector: {}\nport: grpc-web\nproxyProtocol: gRPC\naccessPolicy: audit"},
	{name: "port bounds", kind: ServerKind, spec: "podSelector: {}\nport: 65535"},
	{name: "selector expressions", kind: ServerKind, spec: "podSelector: {matchExpressions: [{key: app.kubernetes.io/name, operator: NotIn, values: [a]}, {key: canary, operator: DoesNotExist}]}\nport: 1"},
	{name: "every protocol and policy", kind: ServerKind, spec: "podSelector: {}\nport: 80\nproxyProtocol: TLS\naccessPolicy: cluster-unauthenticated"},
	{name: "no selector", kind: ServerKind, spec: "port: 80", path: "spec.podSelector", msg: required},
	{name: "no port", kind: ServerKind, spec: "podSelector: {}", path: "spec.port", msg: required},
	{name: "port 0", kind: ServerKind, spec: "podSelector: {}\nport: 0", path: "spec.port", msg: "port 0 is out of range"},
	{name: "port 65536", kind: ServerKind, spec: "podSelector: {}\nport: 65536", path: "spec.port", msg: "port 65536 is out of range"},
	{name: "port quoted number", kind: ServerKind, spec: "podSelector: {}\nport: \"8080\"", path: "spec.port", msg: `port "8080" is not a port name`},
	{name: "port name upper case", kind: ServerKind, spec: "podSelector: {}\nport: HTTP", path: "spec.port", msg: `port "HTTP" is not a port name`},
	{name: "port name double dash", kind: ServerKind, spec: "podSelector: {}\nport: a--b", path: "spec.port", msg: "is not a port name"},
	{name: "port name too long", kind: ServerKind, spec: "podSelector: {}\nport: abcdefghijklmnop", path: "spec.port", msg: "is not a port name"},
	{name: "port name empty", kind: ServerKind, spec: "podSelector: {}\nport: \"\"", path: "spec.port", msg: "is not a port name"},
	{name: "proxyProtocol", kind: ServerKind, spec: "podSelector: {}\nport: 80\nproxyProtocol: http", path: "spec.proxyProtocol", msg: unsupported},
	{name: "accessPolicy", kind: ServerKind, spec: "podSelector: {}\nport: 80\naccessPolicy: allow", path: "spec.accessPolicy", msg: unsupported},
	{name: "selector operator", kind: ServerKind, spec: "podSelector: {matchExpressions: [{key: app, operator: Equals, values: [a]}]}\nport: 80", path: "spec.podSelector.matchExpressions[0].operator", msg: unsupported},
	{name: "selector In without values", kind: ServerKind, spec: "podSelector: {matchExpressions: [{key: app, operator: In}]}\nport: 80", path: "spec.podSelector.matchExpressions[0].values", msg: "must not be empty with operator In or NotIn"},
	{name: "selector Exists with values", kind: ServerKind, spec: "podSelector: {matchExpressions: [{key: app, operator: Exists, values: [a]}]}\nport: 80", path: "spec.podSelector.matchExpressions[0].values", msg: "must be empty with operator Exists"},
	{name: "selector key", kind: ServerKind, spec: "podSelector: {matchExpressions: [{key: -app, operator: Exists}]}\nport: 80", path: "spec.podSelector.matchExpressions[0].key", msg: noPattern},
	{name: "selector label value", kind: ServerKind, spec: "podSelector: {matchLabels: {app: web server}}\nport: 80", path: "spec.podSelector.matchLabels.app", msg: noPattern},
	{name: "selector label key", kind: ServerKind, spec: "podSelector: {matchLabels: {_app: web}}\nport: 80", path: "spec.podSelector.matchLabels", msg: "every key must be a label key"},

	// AuthorizationPolicy
	{name: "unauthenticated to a Server", kind: AuthorizationPolicyKind, spec: serverTarget + noAuthn},
	{name: "to an HTTPRoute", kind: AuthorizationPolicyKind, spec: "targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}\nrequiredAuthenticationRefs: [{group: policy.plexus.dev, kind: MeshTLSAuthentication, name: a}, {group: policy.plexus.dev, kind: NetworkAuthentication, name: b, namespace: other}]"},
	{name: "to a GRPCRoute", kind: AuthorizationPolicyKind, spec: "targetRef: {group: gateway.networking.k8s.io, kind: GRPCRoute, name: web}\nrequiredAuthenticationRefs: [{kind: ServiceAccount, name: a, namespace: other}]"},
	{name: "to a Namespace", kind: AuthorizationPolicyKind, spec: "targetRef: {kind: Namespace, name: default}\nrequiredAuthenticationRefs: [{group: core, kind: ServiceAccount, name: a}]"},
	{name: "to a Namespace, group core", kind: AuthorizationPolicyKind, spec: "targetRef: {group: core, kind: Namespace, name: default}\nrequiredAuthenticationRefs: [{group: \"\", kind: ServiceAccount, name: a}]"},
	{name: "no targetRef", kind: AuthorizationPolicyKind, spec: noAuthn, path: "spec.targetRef", msg: required},
	{name: "no requiredAuthenticationRefs", kind: AuthorizationPolicyKind, spec: serverTarget, path: "spec.requiredAuthenticationRefs", msg: required},
	{name: "Server without group", kind: AuthorizationPolicyKind, spec: "targetRef: {kind: Server, name: web}\n" + noAuthn, path: "spec.targetRef", msg: `targetRef: kind Server in group "" cannot be targeted`},
	{name: "Service", kind: AuthorizationPolicyKind, spec: "targetRef: {kind: Service, name: web}\n" + noAuthn, path: "spec.targetRef", msg: "cannot be targeted"},
	{name: "HTTPRoute of another group", kind: AuthorizationPolicyKind, spec: "targetRef: {group: policy.plexus.dev, kind: HTTPRoute, name: web}\n" + noAuthn, path: "spec.targetRef", msg: "cannot be targeted"},
	{name: "Namespace of another group", kind: AuthorizationPolicyKind, spec: "targetRef: {group: policy.plexus.dev, kind: Namespace, name: default}\n" + noAuthn, path: "spec.targetRef", msg: "cannot be targeted"},
	{name: "target without name", kind: AuthorizationPolicyKind, spec: "targetRef: {group: policy.plexus.dev, kind: Server, name: \"\"}\n" + noAuthn, path: "spec.targetRef.name", msg: tooShort},
	{name: "authentication of another kind", kind: AuthorizationPolicyKind, spec: serverTarget + "requiredAuthenticationRefs: [{kind: Secret, name: a}]", path: "spec.requiredAuthenticationRefs[0]", msg: `requiredAuthenticationRefs: kind Secret in group "" is no authentication`},
	{name: "MeshTLSAuthentication without group", kind: AuthorizationPolicyKind, spec: serverTarget + "requiredAuthenticationRefs: [{kind: NetworkAuthentication, name: b}, {kind: MeshTLSAuthentication, name: a}]", path: "spec.requiredAuthenticationRefs[1]", msg: "is no authentication"},
	{name: "two MeshTLSAuthentications", kind: AuthorizationPolicyKind, spec: serverTarget + "requiredAuthenticationRefs: [{group: policy.plexus.dev, kind: MeshTLSAuthentication, name: a}, {group: policy.plexus.dev, kind: MeshTLSAuthentication, name: b}]", path: "spec.requiredAuthenticationRefs", msg: "at most one MeshTLSAuthentication or ServiceAccount"},
	{name: "MeshTLSAuthentication and ServiceAccount", kind: AuthorizationPolicyKind, spec: serverTarget + "requiredAuthenticationRefs: [{group: policy.plexus.dev, kind: MeshTLSAuthentication, name: a}, {kind: ServiceAccount, name: b}]", path: "spec.requiredAuthenticationRefs", msg: "at most one MeshTLSAuthentication or ServiceAccount"},
	{name: "two NetworkAuthentications", kind: AuthorizationPolicyKind, spec: serverTarget + "requiredAuthenticationRefs: [{group: policy.plexus.dev, kind: NetworkAuthentication, name: a}, {group: policy.plexus.dev, kind: NetworkAuthentication, name: b}]", path: "spec.requiredAuthenticationRefs", msg: "at most one NetworkAuthentication"},
	{name: "authentication namespace", kind: AuthorizationPolicyKind, spec: serverTarget + "requiredAuthenticationRefs: [{kind: ServiceAccount, name: a, namespace: Other}]", path: "spec.requiredAuthenticationRefs[0].namespace", msg: noPattern},

	// MeshTLSAuthentication
	{name: "SPIFFE IDs and wildcards", kind: MeshTLSAuthenticationKind, spec: "identities: [spiffe://cluster.local/ns/shop/sa/web, spiffe://example.org, '*.shop.example.org', '*']"},
	{name: "identityRefs", kind: MeshTLSAuthenticationKind, spec: "identityRefs: [{kind: ServiceAccount, name: web}, {kind: ServiceAccount, name: web, namespace: other}, {kind: Namespace, name: edge}]"},
	{name: "neither", kind: MeshTLSAuthenticationKind, spec: "{}", path: "spec", msg: "set exactly one of identities and identityRefs"},
	{name: "both", kind: MeshTLSAuthenticationKind, spec: "identities: ['*']\nidentityRefs: [{kind: Namespace, name: edge}]", path: "spec", msg: "set exactly one of identities and identityRefs"},
	{name: "no identities", kind: MeshTLSAuthenticationKind, spec: "identities: []", path: "spec.identities", msg: atLeastOne},
	{name: "no identityRefs", kind: MeshTLSAuthenticationKind, spec: "identityRefs: []", path: "spec.identityRefs", msg: atLeastOne},
	{name: "wildcard inside", kind: MeshTLSAuthenticationKind, spec: "identities: [spiffe://cluster.local/ns/shop/sa/web, 'spiffe://cluster.local/ns/*/sa/web']", path: "spec.identities[1]", msg: `identities: "spiffe://cluster.local/ns/*/sa/web": a * stands only for the whole identity or for its leading label`},
	{name: "wildcard in a label", kind: MeshTLSAuthenticationKind, spec: "identities: ['web*.example.org']", path: "spec.identities[0]", msg: "a * stands only for"},
	{name: "two wildcards", kind: MeshTLSAuthenticationKind, spec: "identities: ['*.*.example.org']", path: "spec.identities[0]", msg: "a * stands only for"},
	{name: "DNS name", kind: MeshTLSAuthenticationKind, spec: "identities: [web.shop.serviceaccount.identity.plexus.cluster.local]", path: "spec.identities[0]", msg: `identities: "web.shop.serviceaccount.identity.plexus.cluster.local" is not a SPIFFE ID`},
	{name: "SPIFFE trust domain upper case", kind: MeshTLSAuthenticationKind, spec: "identities: [spiffe://Cluster.local/ns/a/sa/b]", path: "spec.identities[0]", msg: "is not a SPIFFE ID"},
	{name: "SPIFFE dot segment", kind: MeshTLSAuthenticationKind, spec: "identities: [spiffe://cluster.local/ns/../sa/b]", path: "spec.identities[0]", msg: "is not a SPIFFE ID"},
	{name: "SPIFFE trailing slash", kind: MeshTLSAuthenticationKind, spec: "identities: [spiffe://cluster.local/ns/a/]", path: "spec.identities[0]", msg: "is not a SPIFFE ID"},
	{name: "wildcard suffix upper case", kind: MeshTLSAuthenticationKind, spec: "identities: ['*.Example.org']", path: "spec.identities[0]", msg: `identities: "*.Example.org": after *. must come a lowercase DNS name`},
	{name: "wildcard suffix empty", kind: MeshTLSAuthenticationKind, spec: "identities: ['*.']", path: "spec.identities[0]", msg: "after *. must come a lowercase DNS name"},
	{name: "identityRef kind", kind: MeshTLSAuthenticationKind, spec: "identityRefs: [{kind: Pod, name: web}]", path: "spec.identityRefs[0].kind", msg: unsupported},
	{name: "identityRef without name", kind: MeshTLSAuthenticationKind, spec: "identityRefs: [{kind: ServiceAccount}]", path: "spec.identityRefs[0].name", msg: required},
	{name: "Namespace with namespace", kind: MeshTLSAuthenticationKind, spec: "identityRefs: [{kind: Namespace, name: edge, namespace: other}]", path: "spec.identityRefs[0].namespace", msg: "identityRefs: namespace must be unset for a Namespace"},

	// NetworkAuthentication
	{name: "networks", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 0.0.0.0/0, except: [10.0.0.0/8, 127.0.0.1]}, {cidr: '::/0', except: ['fd00::/8', '::1']}, {cidr: 10.1.2.3/16}, {cidr: 192.168.0.1}]"},
	{name: "no networks", kind: NetworkAuthenticationKind, spec: "{}", path: "spec.networks", msg: required},
	{name: "empty networks", kind: NetworkAuthenticationKind, spec: "networks: []", path: "spec.networks", msg: atLeastOne},
	{name: "no cidr", kind: NetworkAuthenticationKind, spec: "networks: [{except: [10.0.0.0/8]}]", path: "spec.networks[0].cidr", msg: required},
	{name: "cidr prefix too long", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8}, {cidr: 10.0.0.0/33}]", path: "spec.networks[1].cidr", msg: `cidr: "10.0.0.0/33" is neither a CIDR`},
	{name: "cidr a name", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: example.org}]", path: "spec.networks[0].cidr", msg: "is neither a CIDR"},
	{name: "cidr IPv4-mapped", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: '::ffff:10.0.0.0/104'}]", path: "spec.networks[0].cidr", msg: "is neither a CIDR"},
	{name: "except malformed", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8, except: [10.0.0.256]}]", path: "spec.networks[0].except[0]", msg: `except: "10.0.0.256" is neither a CIDR`},
	{name: "except outside", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8, except: [10.1.0.0/16, 11.0.0.0/16]}]", path: "spec.networks[0].except", msg: "except: every exception must lie inside cidr 10.0.0.0/8 and be smaller than it"},
	{name: "except all of it", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8, except: [10.0.0.0/8]}]", path: "spec.networks[0].except", msg: "must lie inside cidr"},
	{name: "except wider", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8, except: [0.0.0.0/0]}]", path: "spec.networks[0].except", msg: "must lie inside cidr"},
	{name: "except address outside", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8, except: [192.168.0.1]}]", path: "spec.networks[0].except", msg: "must lie inside cidr"},
	{name: "except other family", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.0/8, except: ['fd00::/8']}]", path: "spec.networks[0].except", msg: "must lie inside cidr"},
	{name: "except the one address", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.1/32, except: [10.0.0.1]}]", path: "spec.networks[0].except", msg: "must lie inside cidr"},
	{name: "except of an address", kind: NetworkAuthenticationKind, spec: "networks: [{cidr: 10.0.0.1, except: [10.0.0.1]}]", path: "spec.networks[0].except", msg: "must lie inside cidr"},

	// HTTPLocalRateLimitPolicy
	{name: "total", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + onlyTotal},
	{name: "identity alone", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "identity: {requestsPerSecond: 10}"},
	{name: "overrides alone", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "overrides: [{requestsPerSecond: 10, clientRefs: [{kind: ServiceAccount, name: a}]}]"},
	{name: "equal to total", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + onlyTotal + "identity: {requestsPerSecond: 100}\noverrides: [{requestsPerSecond: 100, clientRefs: [{kind: ServiceAccount, name: a, namespace: b}]}]"},
	{name: "no limit", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget, path: "spec", msg: "set at least one of total, identity and overrides"},
	{name: "empty overrides only", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "overrides: []", path: "spec", msg: "set at least one of total, identity and overrides"},
	{name: "no targetRef", kind: HTTPLocalRateLimitPolicyKind, spec: onlyTotal, path: "spec.targetRef", msg: required},
	{name: "target a route", kind: HTTPLocalRateLimitPolicyKind, spec: "targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}\n" + onlyTotal, path: "spec.targetRef", msg: `targetRef: kind HTTPRoute in group "gateway.networking.k8s.io" cannot be limited`},
	{name: "Server without group", kind: HTTPLocalRateLimitPolicyKind, spec: "targetRef: {kind: Server, name: web}\n" + onlyTotal, path: "spec.targetRef", msg: "cannot be limited"},
	{name: "total 0", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "total: {requestsPerSecond: 0}", path: "spec.total.requestsPerSecond", msg: atLeast1},
	{name: "total without rate", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "total: {}", path: "spec.total.requestsPerSecond", msg: required},
	{name: "total a string", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "total: {requestsPerSecond: \"10\"}", path: "spec.total.requestsPerSecond", msg: "must be of type integer"},
	{name: "identity 0", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "identity: {requestsPerSecond: 0}", path: "spec.identity.requestsPerSecond", msg: atLeast1},
	{name: "identity over total", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + onlyTotal + "identity: {requestsPerSecond: 101}", path: "spec.identity.requestsPerSecond", msg: "identity.requestsPerSecond must not exceed total.requestsPerSecond"},
	{name: "override over total", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + onlyTotal + "overrides: [{requestsPerSecond: 50, clientRefs: [{kind: ServiceAccount, name: a}]}, {requestsPerSecond: 200, clientRefs: [{kind: ServiceAccount, name: b}]}]", path: "spec.overrides", msg: "overrides: no requestsPerSecond may exceed total.requestsPerSecond"},
	{name: "override 0", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "overrides: [{requestsPerSecond: 0, clientRefs: [{kind: ServiceAccount, name: a}]}]", path: "spec.overrides[0].requestsPerSecond", msg: atLeast1},
	{name: "override without clients", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "overrides: [{requestsPerSecond: 10, clientRefs: []}]", path: "spec.overrides[0].clientRefs", msg: atLeastOne},
	{name: "override client kind", kind: HTTPLocalRateLimitPolicyKind, spec: serverTarget + "overrides: [{requestsPerSecond: 10, clientRefs: [{kind: Namespace, name: a}]}]", path: "spec.overrides[0].clientRefs[0].kind", msg: unsupported},
}
