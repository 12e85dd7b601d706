// Package tappb is the generated gRPC API of the proxy's tap server (tap.proto).
package tappb
