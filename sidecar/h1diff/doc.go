// Package h1diff is a differential HTTP/1 test suite (tests only): raw requests and scripted responses sent through two real plexus-proxy processes in network namespaces, checked against what a strict Go origin, nginx and a scripted origin parsed.
package h1diff
