package destination

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// target is a parsed GetDestination.path: either a service name (Name and
// Namespace set) or an IP address (IP valid), and a port.
type target struct {
	Namespace string
	Name      string
	IP        netip.Addr
	Port      uint16
}

// fqdn is the service's fully qualified name without the port.
func (t target) fqdn(clusterDomain string) string {
	return t.Name + "." + t.Namespace + ".svc." + clusterDomain
}

// parsePath parses "<svc>.<ns>.svc.<clusterDomain>:<port>", "<ip>:<port>"
// or "[<ipv6>]:<port>". Names are matched case-insensitively and may end in
// a dot. Anything else is a *PathError.
func parsePath(path, clusterDomain string) (target, error) {
	host, portText, err := net.SplitHostPort(path)
	if err != nil {
		return target{}, &PathError{Path: path, Reason: "want host:port (" + err.Error() + ")"}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return target{}, &PathError{Path: path, Reason: "port " + strconv.Quote(portText) + " is not a number in 1-65535"}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return target{}, &PathError{Path: path, Reason: "IP address must not have a zone"}
		}
		return target{IP: ip.Unmap(), Port: uint16(port)}, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	suffix := ".svc." + strings.ToLower(clusterDomain)
	rest, ok := strings.CutSuffix(name, suffix)
	if !ok {
		return target{}, &PathError{Path: path, Reason: "not an IP address nor a service name ending in " + suffix[1:]}
	}
	svc, ns, ok := strings.Cut(rest, ".")
	if !ok || svc == "" || ns == "" || strings.Contains(ns, ".") {
		return target{}, &PathError{Path: path, Reason: "service name must be <service>.<namespace>" + suffix}
	}
	return target{Namespace: ns, Name: svc, Port: uint16(port)}, nil
}
