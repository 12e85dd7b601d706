// Package tapview prints a tap's events (mesh/api/tapapi) as plexusctl
// viz tap shows them: one line per event in Linkerd's shape, or the events
// as JSON lines.
package tapview

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// Formats of a Printer.
const (
	FormatLines = ""
	FormatWide  = "wide" // lines with the workloads of both ends and the route
	FormatJSON  = "json"
)

// Printer writes events to Out; in the line formats, dropped events and
// pods that could not be tapped are reported on Notes instead.
type Printer struct {
	Out, Notes io.Writer
	Format     string
}

// Print writes one event.
func (p Printer) Print(ev tapapi.Event) error {
	if p.Format == FormatJSON {
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encoding a tap event: %w", err)
		}
		_, err = fmt.Fprintf(p.Out, "%s\n", b)
		return err
	}
	switch ev.Type {
	case tapapi.Dropped:
		_, err := fmt.Fprintf(p.Notes, "%s/%s dropped %d events: the tap reads slower than the traffic comes (narrow the filter or lower --max-rate)\n", ev.Namespace, ev.Pod, ev.Count)
		return err
	case tapapi.Error:
		_, err := fmt.Fprintf(p.Notes, "%s/%s could not be tapped: %s\n", ev.Namespace, ev.Pod, ev.Message)
		return err
	}
	line := Line(ev, p.Format == FormatWide)
	if line == "" {
		return nil // a type this version does not know
	}
	_, err := fmt.Fprintln(p.Out, line)
	return err
}

// Line renders a request, response or end event:
//
//	req id=web-1:7 proxy=in src=10.0.0.1:51234 dst=10.0.0.2:8080 tls=true :method=GET :authority=web:80 :path=/books
//	rsp id=web-1:7 proxy=in src=10.0.0.1:51234 dst=10.0.0.2:8080 tls=true :status=200 latency=1234µs
//	end id=web-1:7 proxy=in src=10.0.0.1:51234 dst=10.0.0.2:8080 tls=true duration=1500µs response-length=512B
//
// (end adds grpc-status= for gRPC and reason= when the exchange ended
// early). wide appends the ends' workloads, namespaces and clusters
// (src_cluster, dst_cluster: a linked cluster's trust domain) and the
// route. Other event
// types render as "".
func Line(ev tapapi.Event, wide bool) string {
	var b strings.Builder
	switch ev.Type {
	case tapapi.RequestStart:
		b.WriteString("req")
	case tapapi.ResponseStart:
		b.WriteString("rsp")
	case tapapi.ResponseEnd:
		b.WriteString("end")
	default:
		return ""
	}
	field := func(k, v string) {
		b.WriteByte(' ')
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(Printable(v))
	}
	field("id", ev.ID)
	field("proxy", proxy(ev.Direction))
	field("src", ev.Source.Addr)
	field("dst", ev.Destination.Addr)
	field("tls", strconv.FormatBool(ev.TLS))
	switch ev.Type {
	case tapapi.RequestStart:
		field(":method", ev.Method)
		field(":authority", ev.Authority)
		field(":path", ev.Path)
	case tapapi.ResponseStart:
		field(":status", strconv.Itoa(ev.Status))
		field("latency", Micros(ev.LatencyMs))
	case tapapi.ResponseEnd:
		if ev.GRPCStatus != nil {
			field("grpc-status", GRPCStatus(*ev.GRPCStatus))
		}
		field("duration", Micros(ev.DurationMs))
		field("response-length", strconv.FormatInt(ev.ResponseBytes, 10)+"B")
		if ev.Reason != "" {
			field("reason", ev.Reason)
		}
	}
	if wide {
		for _, e := range []struct {
			prefix string
			p      tapapi.Peer
		}{{"src", ev.Source}, {"dst", ev.Destination}} {
			if r := Resource(e.p); r != "" {
				field(e.prefix+"_res", r)
			}
			if e.p.Namespace != "" {
				field(e.prefix+"_ns", e.p.Namespace)
			}
			if e.p.Cluster != "" {
				field(e.prefix+"_cluster", e.p.Cluster)
			}
		}
		if ev.Route != "" {
			field("route", ev.Route)
		}
	}
	return b.String()
}

func proxy(direction string) string {
	switch direction {
	case "inbound":
		return "in"
	case "outbound":
		return "out"
	}
	return direction
}

// Printable is s with control characters, spaces and invalid UTF-8
// escaped as Go escapes them, so that a request's path or authority can
// neither split a line nor reach the terminal as an escape sequence.
func Printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError || !unicode.IsPrint(r) }) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return strings.ReplaceAll(q[1:len(q)-1], " ", `\x20`)
}

// Micros renders milliseconds as whole microseconds, "1234µs".
func Micros(ms float64) string {
	return strconv.FormatInt(int64(math.Round(ms*1000)), 10) + "µs"
}

// GRPCStatus names a gRPC status code ("OK", "Unavailable"), or gives its
// number when it has no name.
func GRPCStatus(code int) string {
	if code < 0 || code > math.MaxUint32 {
		return strconv.Itoa(code)
	}
	return codes.Code(uint32(code)).String()
}

// Resource names a peer's workload the way kubectl does ("deploy/web"),
// else its pod ("po/web-1"); "" when the tap service did not know it.
func Resource(p tapapi.Peer) string {
	if p.WorkloadKind == tapapi.KindServiceAccount && p.WorkloadName != "" {
		return "sa/" + p.WorkloadName
	}
	if p.WorkloadKind != "" && p.WorkloadName != "" {
		return kinds.ShortName(p.WorkloadKind) + "/" + p.WorkloadName
	}
	if p.Pod != "" {
		return "po/" + p.Pod
	}
	return ""
}

// Name is a peer as a table shows it: its pod; else, for a peer the tap
// service named by its identity (a linked cluster's, or one relayed by a
// gateway), its service account as [CLUSTER:]NAMESPACE/sa/NAME; else its
// address without the port.
func Name(p tapapi.Peer) string {
	if p.Pod != "" {
		return p.Pod
	}
	if p.WorkloadKind != "" && p.Namespace != "" {
		n := p.Namespace + "/" + Resource(p)
		if p.Cluster != "" {
			n = p.Cluster + ":" + n
		}
		return n
	}
	if host, _, err := net.SplitHostPort(p.Addr); err == nil {
		return host
	}
	return p.Addr
}
