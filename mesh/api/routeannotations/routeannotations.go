// Package routeannotations is the contract for the retry and timeout
// annotations on Services, HTTPRoutes and GRPCRoutes (ARCHITECTURE.md §8): their
// names, their syntax, and how a route's override a Service's. It imports
// only the standard library, so the proxy, the CLI and the control plane
// can all share it.
package routeannotations

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The annotation names.
const (
	RetryHTTP       = "retry.plexus.dev/http"
	RetryGRPC       = "retry.plexus.dev/grpc"
	RetryLimit      = "retry.plexus.dev/limit"
	RetryTimeout    = "retry.plexus.dev/timeout"
	RetryBudget     = "retry.plexus.dev/budget"
	TimeoutRequest  = "timeout.plexus.dev/request"
	TimeoutResponse = "timeout.plexus.dev/response"
	TimeoutIdle     = "timeout.plexus.dev/idle"
)

// DefaultLimit is the retry limit once any retry condition is set and
// retry.plexus.dev/limit is not.
const DefaultLimit uint32 = 1

// DefaultBudget is the budget of every retry path without
// retry.plexus.dev/budget (Linkerd's profile default).
var DefaultBudget = Budget{Ratio: 0.2, MinPerSecond: 10, TTL: 10 * time.Second}

// Bounds of retry.plexus.dev/budget.
const (
	MaxBudgetRatio = 1000
	MinBudgetTTL   = time.Second
	MaxBudgetTTL   = time.Minute
)

// StatusRange is an inclusive range of HTTP statuses.
type StatusRange struct{ Min, Max uint32 }

// Budget bounds retries: at most Ratio × requests + MinPerSecond × TTL
// retries over TTL.
type Budget struct {
	Ratio        float64
	MinPerSecond uint32
	TTL          time.Duration
}

// Settings are the annotations of one object as parsed. A nil field is an
// annotation that is not set (or was malformed); a list annotation is
// never set to an empty list.
type Settings struct {
	HTTPStatuses    []StatusRange
	GRPCCodes       []uint32
	Limit           *uint32
	AttemptTimeout  *time.Duration
	Budget          *Budget
	RequestTimeout  *time.Duration
	ResponseTimeout *time.Duration
	IdleTimeout     *time.Duration
}

// Retries reports whether any retry condition is set and the limit, if
// set, allows a retry.
func (s Settings) Retries() bool {
	return (len(s.HTTPStatuses) > 0 || len(s.GRPCCodes) > 0) && s.EffectiveLimit() > 0
}

// EffectiveLimit is Limit, or DefaultLimit when it is not set.
func (s Settings) EffectiveLimit() uint32 {
	if s.Limit != nil {
		return *s.Limit
	}
	return DefaultLimit
}

// EffectiveBudget is Budget, or DefaultBudget when it is not set.
func (s Settings) EffectiveBudget() Budget {
	if s.Budget != nil {
		return *s.Budget
	}
	return DefaultBudget
}

// Merge returns service with every annotation set on route put in its
// place: each annotation on the route wins over the same one on the
// Service, the others are the Service's.
func Merge(service, route Settings) Settings {
	out := service
	if route.HTTPStatuses != nil {
		out.HTTPStatuses = route.HTTPStatuses
	}
	if route.GRPCCodes != nil {
		out.GRPCCodes = route.GRPCCodes
	}
	override(&out.Limit, route.Limit)
	override(&out.AttemptTimeout, route.AttemptTimeout)
	override(&out.Budget, route.Budget)
	override(&out.RequestTimeout, route.RequestTimeout)
	override(&out.ResponseTimeout, route.ResponseTimeout)
	override(&out.IdleTimeout, route.IdleTimeout)
	return out
}

func override[T any](dst **T, src *T) {
	if src != nil {
		*dst = src
	}
}

// Parse reads the retry and timeout annotations from annotations (others
// are ignored). Every malformed value is an error naming the annotation
// and the value, all joined; the Settings hold what was valid, a
// malformed annotation being left unset.
func Parse(annotations map[string]string) (Settings, error) {
	var s Settings
	p := parser{annotations: annotations}
	s.HTTPStatuses = list(&p, RetryHTTP, parseHTTPStatuses)
	s.GRPCCodes = list(&p, RetryGRPC, parseGRPCCodes)
	s.Limit = one(&p, RetryLimit, parseLimit)
	s.AttemptTimeout = one(&p, RetryTimeout, parsePositiveDuration)
	s.Budget = one(&p, RetryBudget, parseBudget)
	s.RequestTimeout = one(&p, TimeoutRequest, parsePositiveDuration)
	s.ResponseTimeout = one(&p, TimeoutResponse, parsePositiveDuration)
	s.IdleTimeout = one(&p, TimeoutIdle, parsePositiveDuration)
	return s, errors.Join(p.errs...)
}

type parser struct {
	annotations map[string]string
	errs        []error
}

// list parses the list annotation name with parse; see one.
func list[T any](p *parser, name string, parse func(string) ([]T, error)) []T {
	v, _ := parseAnnotation(p, name, parse)
	return v
}

// one parses the annotation name with parse: nil when it is not set or
// malformed.
func one[T any](p *parser, name string, parse func(string) (T, error)) *T {
	v, ok := parseAnnotation(p, name, parse)
	if !ok {
		return nil
	}
	return &v
}

// parseAnnotation parses the annotation name with parse, recording a
// malformed value as the error `name: "value" <parse's error>`.
func parseAnnotation[T any](p *parser, name string, parse func(string) (T, error)) (T, bool) {
	var zero T
	raw, found := p.annotations[name]
	if !found {
		return zero, false
	}
	v, err := parse(strings.TrimSpace(raw))
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %q %w", name, raw, err))
		return zero, false
	}
	return v, true
}

// errNotA is "is not <what>", the tail of every malformed-value error.
func errNotA(what string) error { return errors.New("is not " + what) }

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errNotA("a positive duration (like 500ms or 10s)")
	}
	return d, nil
}

func parseLimit(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, errNotA("a non-negative integer")
	}
	return uint32(n), nil
}

// parseEach parses a comma list (spaces allowed around items) with
// parse; what names the items a malformed one is not.
func parseEach[T any](s, what string, parse func(string) (T, bool)) ([]T, error) {
	items := strings.Split(s, ",")
	out := make([]T, 0, len(items))
	for _, item := range items {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, errNotA("a comma-separated list (an item is empty)")
		}
		v, ok := parse(item)
		if !ok {
			return nil, fmt.Errorf("is not a list of %s: %q", what, item)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseHTTPStatuses(s string) ([]StatusRange, error) {
	return parseEach(s, "5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599)", parseStatusRange)
}

func parseStatusRange(item string) (StatusRange, bool) {
	switch strings.ToLower(item) {
	case "5xx":
		return StatusRange{500, 599}, true
	case "gateway-error":
		return StatusRange{502, 504}, true
	}
	lo, hi, isRange := strings.Cut(item, "-")
	if !isRange {
		hi = lo
	}
	min, okMin := parseStatus(strings.TrimSpace(lo))
	max, okMax := parseStatus(strings.TrimSpace(hi))
	return StatusRange{min, max}, okMin && okMax && min <= max
}

func parseStatus(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil && len(s) == 3 && n >= 100 && n <= 599
}

// grpcCodes are the gRPC status codes retry.plexus.dev/grpc names.
var grpcCodes = map[string]uint32{
	"cancelled":          1,
	"deadline-exceeded":  4,
	"resource-exhausted": 8,
	"internal":           13,
	"unavailable":        14,
}

func parseGRPCCodes(s string) ([]uint32, error) {
	return parseEach(s, "cancelled, deadline-exceeded, internal, resource-exhausted or unavailable", func(item string) (uint32, bool) {
		code, ok := grpcCodes[strings.ToLower(item)]
		return code, ok
	})
}

func parseBudget(s string) (Budget, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return Budget{}, errNotA("ratio,min-per-second,ttl (like 0.2,10,10s)")
	}
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	var errs []string
	ratio, err := strconv.ParseFloat(parts[0], 64)
	if err != nil || !(ratio >= 0 && ratio <= MaxBudgetRatio) { // NaN fails both
		errs = append(errs, fmt.Sprintf("ratio %q is not a number from 0 to %d", parts[0], MaxBudgetRatio))
	}
	min, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil {
		errs = append(errs, fmt.Sprintf("min-per-second %q is not a non-negative integer", parts[1]))
	}
	ttl, err := time.ParseDuration(parts[2])
	if err != nil || ttl < MinBudgetTTL || ttl > MaxBudgetTTL {
		errs = append(errs, fmt.Sprintf("ttl %q is not a duration from %v to %v", parts[2], MinBudgetTTL, MaxBudgetTTL))
	}
	if len(errs) > 0 {
		return Budget{}, errNotA("ratio,min-per-second,ttl: " + strings.Join(errs, "; "))
	}
	return Budget{Ratio: ratio, MinPerSecond: uint32(min), TTL: ttl}, nil
}
