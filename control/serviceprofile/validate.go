package serviceprofile

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
)

// Decode reads a ServiceProfile from JSON strictly: an unknown or
// duplicated field is an error naming its path
// ("spec.routes[0].conditon: unknown field"), as is a value of the wrong
// type. Field names are case-sensitive, as in the API server.
func Decode(raw []byte) (*ServiceProfile, error) {
	var sp ServiceProfile
	strict, err := kjson.UnmarshalStrict(raw, &sp)
	if err != nil {
		return nil, decodeError(raw, err)
	}
	if len(strict) > 0 {
		errs := make([]error, 0, len(strict))
		for _, e := range strict {
			errs = append(errs, strictError(e))
		}
		return nil, errors.Join(errs...)
	}
	return &sp, nil
}

// decodeError names the field and value a decoding error is about where
// it can: a value of the wrong type, or a weight that is no quantity.
func decodeError(raw []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		v := te.Value
		switch v {
		case "number", "bool":
			v += " " + literalBefore(raw, te.Offset)
		case "string":
			v = stringBefore(raw, te.Offset)
		}
		return fmt.Errorf("%s: Invalid value: %s: want %s", te.Field, v, jsonType(te.Type.Kind()))
	}
	var doc struct {
		Spec struct {
			DstOverrides []struct {
				Weight json.RawMessage `json:"weight"`
			} `json:"dstOverrides"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &doc) == nil {
		for i, d := range doc.Spec.DstOverrides {
			var q resource.Quantity
			if qerr := json.Unmarshal(d.Weight, &q); qerr != nil {
				return fmt.Errorf("spec.dstOverrides[%d].weight: Invalid value: %s: %w", i, d.Weight, qerr)
			}
		}
	}
	return fmt.Errorf("decoding ServiceProfile: %w", err)
}

// literalBefore returns the number or boolean literal that ends at off.
func literalBefore(raw []byte, off int64) string {
	if off <= 0 || off > int64(len(raw)) {
		return ""
	}
	i := off
	for i > 0 && !strings.ContainsRune(":,[ \t\r\n", rune(raw[i-1])) {
		i--
	}
	return string(raw[i:off])
}

// stringBefore returns the JSON string literal that ends at off, quotes
// included, or "string" if there is none.
func stringBefore(raw []byte, off int64) string {
	if off < 2 || off > int64(len(raw)) || raw[off-1] != '"' {
		return "string"
	}
	for i := off - 2; i >= 0; i-- {
		if raw[i] == '"' && (i == 0 || raw[i-1] != '\\') {
			return string(raw[i:off])
		}
	}
	return "string"
}

func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "an integer in the range of " + k.String()
}

// strictError rewrites `unknown field "a.b"` as "a.b: unknown field", the
// shape of every other problem this package reports.
func strictError(err error) error {
	var fe kjson.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	kind, _, _ := strings.Cut(fe.Error(), " \"")
	return fmt.Errorf("%s: %s", fe.FieldPath(), kind)
}

// Validate reports every problem of sp, each naming the field and its
// value, joined with errors.Join; nil if there is none. It checks what
// the API server cannot (the CRD schema keeps spec open so that unknown
// fields reach the admission webhook):
//
//   - the name is <svc>.<ns>.svc.<clusterDomain>, svc a DNS-1035 label and
//     ns a DNS-1123 label. Linkerd also accepts any DNS-1123 subdomain, for
//     profiles of authorities that are not Services; Plexus refuses them,
//     because its destination service serves profiles for Services only
//     (a non-Service path gets the default route), so such a profile
//     would be accepted and never used.
//   - every route has a unique, non-empty name and a condition.
//   - a condition node sets at least one of method, pathRegex, all, any
//     and not; several set in one node must all hold, exactly as Linkerd's
//     destination translates them (its own documentation's profiles write
//     `method: GET` and `pathRegex: /books` side by side). all and any
//     may not be empty lists. The same holds for response conditions
//     (status, all, any, not).
//   - pathRegex compiles as RE2; method is an HTTP token.
//   - a status range has each bound 0 (open) or 100..599, and min <= max.
//   - timeout and retryBudget.ttl are Go durations above zero;
//     retryBudget.retryRatio is not negative.
//   - a dstOverrides authority is host:port with a port in 1..65535;
//     weights are not negative and their sum is above zero (all-zero
//     weights would send the Service's traffic nowhere; Linkerd accepts
//     them).
//   - opaquePorts are in 1..65535.
func (sp *ServiceProfile) Validate(clusterDomain string) error {
	var errs field.ErrorList
	errs = append(errs, validateName(field.NewPath("metadata", "name"), sp.Name, clusterDomain)...)

	spec := field.NewPath("spec")
	seen := make(map[string]int, len(sp.Spec.Routes))
	for i, r := range sp.Spec.Routes {
		errs = append(errs, validateRoute(spec.Child("routes").Index(i), r, seen, i)...)
	}
	if rb := sp.Spec.RetryBudget; rb != nil {
		p := spec.Child("retryBudget")
		if rb.RetryRatio < 0 {
			errs = append(errs, field.Invalid(p.Child("retryRatio"), rb.RetryRatio, "must not be negative"))
		}
		errs = append(errs, validateDuration(p.Child("ttl"), rb.TTL, true)...)
	}
	errs = append(errs, validateDstOverrides(spec.Child("dstOverrides"), sp.Spec.DstOverrides)...)
	for i, port := range sp.Spec.OpaquePorts {
		if port < 1 || port > 65535 {
			errs = append(errs, field.Invalid(spec.Child("opaquePorts").Index(i), port, "must be a port in 1..65535"))
		}
	}

	if len(errs) == 0 {
		return nil
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

func validateName(p *field.Path, name, clusterDomain string) field.ErrorList {
	if clusterDomain == "" {
		return field.ErrorList{field.InternalError(p, errors.New("no cluster domain to check the name against"))}
	}
	want := "must be <svc>.<ns>.svc." + clusterDomain + ", the Service's fully qualified name"
	prefix, ok := strings.CutSuffix(name, ".svc."+clusterDomain)
	if !ok {
		return field.ErrorList{field.Invalid(p, name, want+" (Plexus uses profiles for Services only)")}
	}
	svc, ns, ok := strings.Cut(prefix, ".")
	if !ok || strings.Contains(ns, ".") {
		return field.ErrorList{field.Invalid(p, name, want)}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1035Label(svc) {
		errs = append(errs, field.Invalid(p, name, fmt.Sprintf("Service name %q: %s", svc, msg)))
	}
	for _, msg := range validation.IsDNS1123Label(ns) {
		errs = append(errs, field.Invalid(p, name, fmt.Sprintf("namespace %q: %s", ns, msg)))
	}
	return errs
}

func validateRoute(p *field.Path, r *RouteSpec, seen map[string]int, i int) field.ErrorList {
	if r == nil {
		return field.ErrorList{field.Required(p, "a route may not be null")}
	}
	var errs field.ErrorList
	switch first, dup := seen[r.Name]; {
	case r.Name == "":
		errs = append(errs, field.Required(p.Child("name"), "every route needs a name"))
	case dup:
		errs = append(errs, field.Invalid(p.Child("name"), r.Name, fmt.Sprintf("already the name of routes[%d]; route names must be unique", first)))
	default:
		seen[r.Name] = i
	}
	errs = append(errs, validateRequestMatch(p.Child("condition"), r.Condition)...)
	for j, rc := range r.ResponseClasses {
		q := p.Child("responseClasses").Index(j)
		if rc == nil {
			errs = append(errs, field.Required(q, "a response class may not be null"))
			continue
		}
		errs = append(errs, validateResponseMatch(q.Child("condition"), rc.Condition)...)
	}
	errs = append(errs, validateDuration(p.Child("timeout"), r.Timeout, false)...)
	return errs
}

func validateRequestMatch(p *field.Path, m *RequestMatch) field.ErrorList {
	if m == nil {
		return field.ErrorList{field.Required(p, "one of method, pathRegex, all, any or not")}
	}
	var errs field.ErrorList
	set := false
	if m.Method != "" {
		set = true
		if !httpguts.ValidHeaderFieldName(m.Method) {
			errs = append(errs, field.Invalid(p.Child("method"), m.Method, "must be an HTTP method token"))
		}
	}
	if m.PathRegex != "" {
		set = true
		if _, err := regexp.Compile(m.PathRegex); err != nil {
			errs = append(errs, field.Invalid(p.Child("pathRegex"), m.PathRegex, err.Error()))
		}
	}
	treeSet, treeErrs := validateTree(p, m.All, m.Any, m.Not, validateRequestMatch)
	errs = append(errs, treeErrs...)
	if !set && !treeSet {
		errs = append(errs, field.Required(p, "one of method, pathRegex, all, any or not"))
	}
	return errs
}

// validateTree checks the all, any and not branches of a condition node
// with check, and reports whether any of them is set.
func validateTree[T comparable](p *field.Path, all, anyOf []T, not T, check func(*field.Path, T) field.ErrorList) (bool, field.ErrorList) {
	var errs field.ErrorList
	set := false
	for _, l := range []struct {
		name string
		list []T
	}{{"all", all}, {"any", anyOf}} {
		if l.list == nil {
			continue
		}
		set = true
		if len(l.list) == 0 {
			errs = append(errs, field.Required(p.Child(l.name), "may not be an empty list"))
		}
		for i, c := range l.list {
			errs = append(errs, check(p.Child(l.name).Index(i), c)...)
		}
	}
	var zero T
	if not != zero {
		set = true
		errs = append(errs, check(p.Child("not"), not)...)
	}
	return set, errs
}

// Status bounds a response class may name.
const (
	minStatus = 100
	maxStatus = 599
)

func validateResponseMatch(p *field.Path, m *ResponseMatch) field.ErrorList {
	if m == nil {
		return field.ErrorList{field.Required(p, "one of status, all, any or not")}
	}
	var errs field.ErrorList
	set := false
	if s := m.Status; s != nil {
		set = true
		q := p.Child("status")
		for _, b := range []struct {
			name string
			v    uint32
		}{{"min", s.Min}, {"max", s.Max}} {
			if b.v != 0 && (b.v < minStatus || b.v > maxStatus) {
				errs = append(errs, field.Invalid(q.Child(b.name), b.v, fmt.Sprintf("must be 0 (open) or a status in %d..%d", minStatus, maxStatus)))
			}
		}
		if s.Min != 0 && s.Max != 0 && s.Min > s.Max {
			errs = append(errs, field.Invalid(q, fmt.Sprintf("min %d, max %d", s.Min, s.Max), "min must not be above max"))
		}
	}
	treeSet, treeErrs := validateTree(p, m.All, m.Any, m.Not, validateResponseMatch)
	errs = append(errs, treeErrs...)
	if !set && !treeSet {
		errs = append(errs, field.Required(p, "one of status, all, any or not"))
	}
	return errs
}

// validateDuration checks a Go duration above zero; an empty one is
// reported only when required.
func validateDuration(p *field.Path, s string, required bool) field.ErrorList {
	if s == "" {
		if required {
			return field.ErrorList{field.Required(p, "a Go duration above zero, e.g. \"10s\"")}
		}
		return nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, s, err.Error())}
	case d <= 0:
		return field.ErrorList{field.Invalid(p, s, "must be above zero")}
	}
	return nil
}

func validateDstOverrides(p *field.Path, dsts []*WeightedDst) field.ErrorList {
	var errs field.ErrorList
	var sum resource.Quantity
	for i, d := range dsts {
		q := p.Index(i)
		if d == nil {
			errs = append(errs, field.Required(q, "a dstOverride may not be null"))
			continue
		}
		errs = append(errs, validateAuthority(q.Child("authority"), d.Authority)...)
		if d.Weight.Sign() < 0 {
			errs = append(errs, field.Invalid(q.Child("weight"), d.Weight.String(), "must not be negative"))
			continue
		}
		sum.Add(d.Weight)
	}
	if len(dsts) > 0 && len(errs) == 0 && sum.Sign() == 0 {
		weights := make([]string, len(dsts))
		for i, d := range dsts {
			weights[i] = d.Weight.String()
		}
		errs = append(errs, field.Invalid(p, "weights "+strings.Join(weights, ", "), "the weights must sum to more than zero"))
	}
	return errs
}

func validateAuthority(p *field.Path, authority string) field.ErrorList {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		return field.ErrorList{field.Invalid(p, authority, "must be host:port: "+err.Error())}
	}
	var errs field.ErrorList
	if _, ipErr := netip.ParseAddr(host); ipErr != nil {
		for _, msg := range validation.IsDNS1123Subdomain(host) {
			errs = append(errs, field.Invalid(p, authority, fmt.Sprintf("host %q: %s", host, msg)))
		}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		errs = append(errs, field.Invalid(p, authority, fmt.Sprintf("port %q must be in 1..65535", port)))
	}
	return errs
}
