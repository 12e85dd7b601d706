package dashboard

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServerFS(sub)
}

// pageTemplate is the layout with one page's "content".
type pageTemplate struct{ t *template.Template }

// Pages, by file under templates/.
var pageFiles = []string{"namespaces.html", "namespace.html", "workload.html", "topology.html", "tap.html", "controlplane.html"}

func parsePages() (map[string]*pageTemplate, error) {
	out := map[string]*pageTemplate{}
	for _, f := range pageFiles {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+f)
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", f, err)
		}
		out[f] = &pageTemplate{t}
	}
	return out, nil
}

// Crumb is one step of the breadcrumbs.
type Crumb struct{ Name, URL string }

// page is what the layout renders.
type page struct {
	Title  string
	Nav    string // the nav entry to mark
	Crumbs []Crumb
	// Errors are problems to show above the content (a failed query).
	Errors []string
	// Refresh, when set, reloads the page every so many seconds (app.js).
	Refresh int
	Body    any
}

// render writes p with the template file; a template error is a 500.
func (s *Server) render(w http.ResponseWriter, file string, p page) {
	var buf bytes.Buffer
	if err := s.pages[file].t.Execute(&buf, p); err != nil {
		s.log.Error("rendering a page", "page", file, "err", err)
		http.Error(w, "500 internal error: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// gather runs fns concurrently under the query timeout and returns the
// errors' messages.
func (s *Server) gather(ctx context.Context, fns ...func(context.Context) error) []string {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn(ctx) })
	}
	wg.Wait()
	var out []string
	for _, err := range errs {
		if err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}

// row is a golden row with its sparklines.
type row struct {
	vizquery.Golden
	Spark *vizquery.Sparklines
}

func (s *Server) golden(level vizquery.Level, f vizquery.Filter, rows *[]row, sparks bool) func(context.Context) error {
	return func(ctx context.Context) error {
		var gs []vizquery.Golden
		var sl map[vizquery.Key]vizquery.Sparklines
		errs := s.gather(ctx,
			func(ctx context.Context) (err error) {
				gs, err = s.src.Metrics.Golden(ctx, level, f, s.cfg.Window)
				return err
			},
			func(ctx context.Context) (err error) {
				if sparks {
					sl, err = s.src.Metrics.Sparklines(ctx, level, f, s.cfg.SparklineSpan, s.cfg.SparklineStep)
				}
				return err
			})
		for _, g := range gs {
			r := row{Golden: g}
			if sp, ok := sl[g.Key]; ok {
				r.Spark = &sp
			}
			*rows = append(*rows, r)
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
}

type namespacesBody struct {
	Rows   []row
	Health *vizquery.Health
}

func (s *Server) namespaces(w http.ResponseWriter, r *http.Request) {
	var b namespacesBody
	errs := s.gather(r.Context(),
		s.golden(vizquery.ByNamespace, vizquery.Filter{}, &b.Rows, false),
		func(ctx context.Context) error {
			h, err := s.src.Metrics.Health(ctx)
			if err == nil {
				b.Health = &h
			}
			return err
		})
	s.render(w, "namespaces.html", page{Title: "Namespaces", Nav: "namespaces", Errors: errs, Refresh: 30, Body: b})
}

type namespaceBody struct {
	Namespace string
	Rows      []row
	TapURL    string
}

func (s *Server) namespace(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if !validName(ns) {
		http.Error(w, "400 bad request: not a namespace name", http.StatusBadRequest)
		return
	}
	b := namespaceBody{Namespace: ns, TapURL: tapURL(ns, "", "")}
	errs := s.gather(r.Context(), s.golden(vizquery.ByWorkload, vizquery.Filter{Namespace: ns}, &b.Rows, true))
	s.render(w, "namespace.html", page{Title: "Namespace " + ns, Nav: "namespaces", Refresh: 30, Errors: errs,
		Crumbs: []Crumb{{"Namespaces", "/"}, {ns, ""}}, Body: b})
}

type workloadBody struct {
	Key    vizquery.Key
	Row    *row
	Pods   []row
	Routes []routestats.Row
	TapURL string
}

func (s *Server) workload(w http.ResponseWriter, r *http.Request) {
	k := vizquery.Key{Namespace: r.PathValue("ns"), WorkloadKind: r.PathValue("kind"), WorkloadName: r.PathValue("name")}
	if !validName(k.Namespace) || !validKind(k.WorkloadKind) || !validName(k.WorkloadName) {
		http.Error(w, "400 bad request: not a namespace, workload kind or workload name", http.StatusBadRequest)
		return
	}
	f := vizquery.Filter{Namespace: k.Namespace, WorkloadKind: k.WorkloadKind, WorkloadName: k.WorkloadName}
	b := workloadBody{Key: k, TapURL: tapURL(k.Namespace, k.WorkloadKind, k.WorkloadName)}
	var rows []row
	errs := s.gather(r.Context(),
		s.golden(vizquery.ByWorkload, f, &rows, true),
		s.golden(vizquery.ByPod, f, &b.Pods, false),
		func(ctx context.Context) (err error) {
			b.Routes, err = s.src.Metrics.Routes(ctx, f, s.cfg.Window)
			return err
		})
	if len(rows) > 0 {
		b.Row = &rows[0]
	}
	s.render(w, "workload.html", page{Title: k.WorkloadKind + " " + k.WorkloadName, Nav: "namespaces", Refresh: 30, Errors: errs,
		Crumbs: []Crumb{{"Namespaces", "/"}, {k.Namespace, "/namespaces/" + k.Namespace}, {k.WorkloadKind + "/" + k.WorkloadName, ""}}, Body: b})
}

type topologyBody struct {
	Namespace string
	Graph     Graph
	Edges     []vizquery.Edge
}

func (s *Server) topology(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if !validName(ns) {
		http.Error(w, "400 bad request: not a namespace name", http.StatusBadRequest)
		return
	}
	b := topologyBody{Namespace: ns}
	errs := s.gather(r.Context(), func(ctx context.Context) (err error) {
		b.Edges, err = s.src.Metrics.Edges(ctx, ns, s.cfg.Window)
		return err
	})
	b.Graph = layout(ns, b.Edges)
	s.render(w, "topology.html", page{Title: "Topology of " + ns, Nav: "namespaces", Refresh: 30, Errors: errs,
		Crumbs: []Crumb{{"Namespaces", "/"}, {ns, "/namespaces/" + ns}, {"topology", ""}}, Body: b})
}

type controlPlaneBody struct {
	Namespace string
	Results   []healthcheck.Result
	Passed    bool
	Health    *vizquery.Health
}

func (s *Server) controlPlane(w http.ResponseWriter, r *http.Request) {
	b := controlPlaneBody{Namespace: s.cfg.ControlNamespace}
	errs := s.gather(r.Context(),
		func(ctx context.Context) error {
			b.Results = s.src.Checks(ctx)
			return nil
		},
		func(ctx context.Context) error {
			h, err := s.src.Metrics.Health(ctx)
			if err == nil {
				b.Health = &h
			}
			return err
		})
	b.Passed = true
	for i, res := range b.Results {
		if res.Status == healthcheck.Fail && strings.Contains(res.Detail, "forbidden") {
			// The dashboard's account is denied some reads on purpose
			// (the issuer's Secret holds its private key).
			b.Results[i] = healthcheck.Result{Name: res.Name, Status: healthcheck.Warn,
				Detail: "not checked: the dashboard's service account may not read this (" + res.Detail + ")", Hint: "run plexusctl check"}
			continue
		}
		if res.Status == healthcheck.Fail {
			b.Passed = false
		}
	}
	s.render(w, "controlplane.html", page{Title: "Control plane", Nav: "controlplane", Refresh: 60, Errors: errs, Body: b})
}

// validName accepts a Kubernetes object name (a DNS subdomain).
func validName(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 }

// kindRE matches a workload kind (Deployment, StatefulSet, ...).
var kindRE = regexp.MustCompile(`^[A-Za-z]{1,63}$`)

func validKind(s string) bool { return kindRE.MatchString(s) }
