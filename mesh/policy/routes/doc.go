// Package routes compiles the discovery service's OutboundPolicy into the
// proxy's outbound route table: request matching with Gateway API precedence
// (or ServiceProfile first-match order), weighted backends, request and
// response filters, response classification, retry policies with budgets,
// and retry backoff.
package routes
