// Package serviceprofile holds the ServiceProfile resource
// (plexus.dev/v1alpha1), whose spec mirrors Linkerd's linkerd.io/v1alpha2
// field for field, so a Linkerd profile converts by changing its
// apiVersion (ARCHITECTURE.md §8).
package serviceprofile

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, Version and Resource of the CRD.
var GroupVersionResource = schema.GroupVersionResource{Group: "plexus.dev", Version: "v1alpha1", Resource: "serviceprofiles"}

// APIVersion and Kind as written in manifests.
const (
	APIVersion = "plexus.dev/v1alpha1"
	Kind       = "ServiceProfile"
)

// ServiceProfile describes one Service, named
// <svc>.<ns>.svc.<cluster-domain>; it applies to clients in its own
// namespace, and, in the Service's namespace, to every client without one
// of their own.
type ServiceProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
}

// Spec is Linkerd's ServiceProfileSpec.
type Spec struct {
	// Routes, first match wins.
	Routes []*RouteSpec `json:"routes,omitempty"`
	// RetryBudget bounds the retries of every retryable route.
	RetryBudget *RetryBudget `json:"retryBudget,omitempty"`
	// DstOverrides splits the Service's traffic between authorities by
	// weight.
	DstOverrides []*WeightedDst `json:"dstOverrides,omitempty"`
	// OpaquePorts are carried as opaque TCP.
	OpaquePorts []uint32 `json:"opaquePorts,omitempty"`
}

// RouteSpec is one route: which requests, how to classify their
// responses, and whether to retry or time them out.
type RouteSpec struct {
	Name            string           `json:"name"`
	Condition       *RequestMatch    `json:"condition"`
	ResponseClasses []*ResponseClass `json:"responseClasses,omitempty"`
	IsRetryable     bool             `json:"isRetryable,omitempty"`
	// Timeout is a Go duration ("250ms").
	Timeout string `json:"timeout,omitempty"`
}

// RequestMatch is a condition tree over a request; when a node sets
// several fields, all must hold (as Linkerd reads its books profiles).
type RequestMatch struct {
	All       []*RequestMatch `json:"all,omitempty"`
	Not       *RequestMatch   `json:"not,omitempty"`
	Any       []*RequestMatch `json:"any,omitempty"`
	PathRegex string          `json:"pathRegex,omitempty"`
	Method    string          `json:"method,omitempty"`
}

// ResponseClass marks the responses matching Condition as failures (or
// not), for success rate and retries.
type ResponseClass struct {
	Condition *ResponseMatch `json:"condition"`
	IsFailure bool           `json:"isFailure,omitempty"`
}

// ResponseMatch is a condition tree over a response; when a node sets
// several fields, all must hold.
type ResponseMatch struct {
	All    []*ResponseMatch `json:"all,omitempty"`
	Not    *ResponseMatch   `json:"not,omitempty"`
	Any    []*ResponseMatch `json:"any,omitempty"`
	Status *Range           `json:"status,omitempty"`
}

// Range is an inclusive range of HTTP statuses; a zero bound is open.
type Range struct {
	Min uint32 `json:"min,omitempty"`
	Max uint32 `json:"max,omitempty"`
}

// RetryBudget: retries may add at most RetryRatio of the requests, plus
// MinRetriesPerSecond, over TTL (a Go duration).
type RetryBudget struct {
	RetryRatio          float32 `json:"retryRatio"`
	MinRetriesPerSecond uint32  `json:"minRetriesPerSecond"`
	TTL                 string  `json:"ttl"`
}

// WeightedDst sends Weight parts of the traffic to Authority
// ("<svc>.<ns>.svc.<cluster-domain>:<port>").
type WeightedDst struct {
	Authority string            `json:"authority"`
	Weight    resource.Quantity `json:"weight"`
}

// List is a ServiceProfileList.
type List struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceProfile `json:"items"`
}
