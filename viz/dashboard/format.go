package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// funcs are the templates' formatting helpers; a nil figure is "-".
var funcs = template.FuncMap{
	"pct": func(f *float64) string {
		if f == nil {
			return "-"
		}
		return strconv.FormatFloat(*f*100, 'f', 2, 64) + "%"
	},
	"rps": func(f *float64) string {
		if f == nil {
			return "-"
		}
		return strconv.FormatFloat(*f, 'f', 2, 64)
	},
	// ms shows a latency to a tenth of a millisecond under 10 ms (a
	// meshed hop's p50 is under one), to the millisecond above.
	"ms": func(f *float64) string {
		switch {
		case f == nil:
			return "-"
		case *f < 9.95: // what rounds to 10.0 shows as 10
			return strconv.FormatFloat(*f, 'f', 1, 64) + " ms"
		}
		return strconv.FormatFloat(*f, 'f', 0, 64) + " ms"
	},
	"num": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	"num2": func(f float64) string {
		return strconv.FormatFloat(f, 'f', 2, 64)
	},
	// rate classes a success rate: good from 99 %, warn from 95 %.
	"rate": func(f *float64) string {
		switch {
		case f == nil:
			return "none"
		case *f >= 0.99:
			return "good"
		case *f >= 0.95:
			return "warn"
		}
		return "bad"
	},
	"spark":         spark,
	"workloadURL":   workloadURL,
	"tapURL":        tapURL,
	"tapResource":   tapResource,
	"routeName":     routestats.RouteName, // as plexusctl routes names them
	"serviceName":   routestats.ServiceName,
	"pathEscape":    url.PathEscape,
	"edgeTitle":     edgeTitle,
	"workloadLabel": func(w vizquery.Workload) string { return w.String() },
}

// Sparkline is an SVG polyline's path in a W×H box.
type Sparkline struct {
	W, H int
	D    string // the path; "" when there is no point
	Last string // the last value, formatted
}

// spark draws pts over [sl.Start, sl.End] in a w×h box: y from 0 to
// the largest value (success rate: 0 to 1); gaps where a value is nil.
func spark(sl vizquery.Sparklines, which string, w, h int) Sparkline {
	var pts []vizquery.Point
	top := 0.0
	switch which {
	case "success":
		pts, top = sl.SuccessRate, 1
	case "rps":
		pts = sl.RPS
	case "p99":
		pts = sl.LatencyP99
	}
	for _, p := range pts {
		if p.Value != nil {
			top = math.Max(top, *p.Value)
		}
	}
	out := Sparkline{W: w, H: h}
	span := sl.End.Sub(sl.Start).Seconds()
	if span <= 0 || top <= 0 {
		top = 1
	}
	var b strings.Builder
	pen := false
	for _, p := range pts {
		if p.Value == nil {
			pen = false
			continue
		}
		x := float64(w) * p.Time.Sub(sl.Start).Seconds() / math.Max(span, 1)
		y := float64(h-2) - float64(h-4)**p.Value/top
		cmd := "L"
		if !pen {
			cmd = "M"
			pen = true
		}
		fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, x, y)
		switch which {
		case "success":
			out.Last = strconv.FormatFloat(*p.Value*100, 'f', 1, 64) + "%"
		case "rps":
			out.Last = strconv.FormatFloat(*p.Value, 'f', 1, 64) + " rps"
		default:
			out.Last = strconv.FormatFloat(*p.Value, 'f', 0, 64) + " ms"
		}
	}
	out.D = strings.TrimSpace(b.String())
	return out
}

func workloadURL(k vizquery.Key) string {
	return "/namespaces/" + url.PathEscape(k.Namespace) + "/workloads/" + url.PathEscape(k.WorkloadKind) + "/" + url.PathEscape(k.WorkloadName)
}

// tapResource is the tap API's resource for a workload kind.
func tapResource(kind string) string {
	if kind == "" {
		return "namespaces"
	}
	return strings.ToLower(kind) + "s"
}

// tapURL is the tap page for a workload (kind "": the namespace).
func tapURL(ns, kind, name string) string {
	q := url.Values{"namespace": {ns}, "resource": {tapResource(kind)}}
	if kind != "" {
		q.Set("name", name)
	}
	return "/tap?" + q.Encode()
}

func edgeTitle(e vizquery.Edge) string {
	t := e.Source.String() + " → " + e.Destination.String() + " (" + e.Protocol
	if e.Secured {
		t += ", mTLS"
	} else {
		t += ", not secured"
	}
	return t + ")"
}
