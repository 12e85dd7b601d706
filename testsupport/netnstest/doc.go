// Package netnstest creates throw-away network namespaces, veth pairs and
// iptables rules for root-only tests, and removes them on cleanup. Every
// namespace it creates is named proxytest-*; it never touches the root
// namespace's routes or rules.
package netnstest
