// Package vizbrowser drives the viz dashboard (plexus-control web) in a
// real headless Chromium: it visits every page, fails on any console
// error, uncaught exception or Content-Security-Policy violation, checks
// each page's key elements (workload rows, the topology's edges, live tap
// rows), saves a screenshot of each page, and checks that a request for a
// forged Host is refused. The cluster test runs it on the demo; its own
// test runs it on a dashboard with fake sources.
package vizbrowser

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// DefaultChromium is Debian's chromium (integration/cluster/deps.sh chromium).
const DefaultChromium = "/usr/bin/chromium"

// Config says what to visit and what to expect.
type Config struct {
	// BaseURL is the dashboard, e.g. http://127.0.0.1:8084.
	BaseURL string
	// Namespace is the namespace whose pages are visited.
	Namespace string
	// Workload is one of its workloads, "Kind/name" (e.g.
	// "Deployment/web"): its page is visited and it is tapped.
	Workload string
	// MinWorkloads is how many rows the namespace's workload table must
	// have at least.
	MinWorkloads int
	// Edges are the secured edges the topology must show, as source and
	// destination workload names (e.g. {"load", "web"}).
	Edges [][2]string
	// TapWithin is how long the tap view may take to show TapRows rows.
	TapWithin time.Duration
	TapRows   int
	// TapFrom, a label selector, filters the tap view's sources; every
	// row's From must then be TapFromWorkload ("namespace/name").
	TapFrom, TapFromWorkload string
	// ArtifactsDir receives a PNG screenshot of each page.
	ArtifactsDir string
	// Chromium is the browser's path (default DefaultChromium).
	Chromium string
	// PageTimeout bounds loading one page and finding its elements.
	PageTimeout time.Duration
}

// Result is what the pages showed.
type Result struct {
	// Workloads are the rows of the namespace's workload table.
	Workloads []WorkloadRow
	// Edges are the topology's edges as "source → destination", full
	// workload names, secured ones marked " (mTLS)".
	Edges []string
	// TapRows is the number of tap rows seen.
	TapRows int
	// Screenshots are the saved files, by page name.
	Screenshots map[string]string
}

// WorkloadRow is one row of the workload table, its cells by column
// header, the figures parsed (nil when the cell is "-").
type WorkloadRow struct {
	Workload    string            `json:"workload"` // Kind/name
	Cells       map[string]string `json:"cells"`
	SuccessRate *float64          `json:"-"` // 0..1
	RPS         *float64          `json:"-"`
	P50, P99    *float64          `json:"-"` // milliseconds
}

// Available says why Chromium cannot be run, or nil.
func Available(path string) error {
	if path == "" {
		path = DefaultChromium
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no Chromium at %s (install it: integration/cluster/deps.sh chromium): %w", path, err)
	}
	return nil
}

// Run visits the dashboard at cfg.BaseURL and returns what it showed, or
// an error naming every problem found.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = withDefaults(cfg)
	if err := Available(cfg.Chromium); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(cfg.ArtifactsDir, 0o755); err != nil {
		return Result{}, err
	}
	profile, err := os.MkdirTemp("", "vizbrowser-profile-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(profile)
	base, err := url.Parse(strings.TrimSuffix(cfg.BaseURL, "/"))
	if err != nil {
		return Result{}, fmt.Errorf("base URL %q: %w", cfg.BaseURL, err)
	}
	actx, cancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(cfg.Chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(profile), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		// A name that resolves to the dashboard's address: the browser's
		// own view of a DNS-rebinding page.
		chromedp.Flag("host-resolver-rules", "MAP "+rebindHost+" "+base.Hostname()),
	)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()

	d := &driver{cfg: cfg, base: base.String(), ctx: bctx, res: Result{Screenshots: map[string]string{}}}
	if err := d.start(); err != nil {
		return Result{}, fmt.Errorf("starting Chromium: %w", err)
	}
	var errs []error
	for _, p := range d.pages() {
		if err := d.visit(p); err != nil {
			errs = append(errs, fmt.Errorf("page %s (%s): %w", p.name, p.path, err))
		}
	}
	if err := forgedHost(ctx, base); err != nil {
		errs = append(errs, err)
	}
	if err := d.rebindPage(); err != nil {
		errs = append(errs, err)
	}
	return d.res, errors.Join(errs...)
}

func withDefaults(c Config) Config {
	if c.Chromium == "" {
		c.Chromium = DefaultChromium
	}
	if c.PageTimeout == 0 {
		c.PageTimeout = 30 * time.Second
	}
	if c.TapWithin == 0 {
		c.TapWithin = 20 * time.Second
	}
	if c.TapRows == 0 {
		c.TapRows = 1
	}
	if c.ArtifactsDir == "" {
		c.ArtifactsDir = "."
	}
	return c
}

// rebindHost is the name a forged-Host page is loaded under.
const rebindHost = "rebind.plexus.test"

// driver visits pages in one tab, collecting its console's problems.
type driver struct {
	cfg  Config
	base string
	ctx  context.Context
	res  Result

	mu       sync.Mutex
	problems []string // console errors, exceptions, CSP violations since the last visit
}

// start opens the tab, follows its console and records CSP violations
// from the first script of every document.
func (d *driver) start() error {
	if err := chromedp.Do(d.ctx); err != nil {
		return err
	}
	msgs := chromedp.Console(d.ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || strings.Contains(m.Text, "Content Security Policy") {
				d.mu.Lock()
				d.problems = append(d.problems, fmt.Sprintf("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line+1))
				d.mu.Unlock()
			}
		}
	}()
	_, err := chromedp.Call(d.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.__csp = []; document.addEventListener('securitypolicyviolation', function (e) { window.__csp.push(e.violatedDirective + ' blocked ' + e.blockedURI); });`,
	})
	return err
}

// pageCheck is one page and what must be on it.
type pageCheck struct {
	name, path string
	check      func() error
}

func (d *driver) pages() []pageCheck {
	ns := url.PathEscape(d.cfg.Namespace)
	kind, name, _ := strings.Cut(d.cfg.Workload, "/")
	tap := url.Values{"namespace": {d.cfg.Namespace}, "resource": {strings.ToLower(kind) + "s"}, "name": {name}}
	if d.cfg.TapFrom != "" {
		tap.Set("from", d.cfg.TapFrom)
	}
	return []pageCheck{
		{"namespaces", "/", func() error {
			return d.waitCount(fmt.Sprintf(`#namespaces tr.row[data-namespace=%q]`, d.cfg.Namespace), 1)
		}},
		{"namespace", "/namespaces/" + ns, d.checkWorkloads},
		{"workload", "/namespaces/" + ns + "/workloads/" + url.PathEscape(kind) + "/" + url.PathEscape(name), func() error {
			return errors.Join(d.waitCount("#golden", 1), d.waitCount("#pods tr.row", 1), d.waitCount("#routes", 1))
		}},
		{"topology", "/namespaces/" + ns + "/topology", d.checkTopology},
		{"tap", "/tap?" + tap.Encode(), d.checkTap},
		{"controlplane", "/controlplane", func() error { return d.waitCount("#checks li.check", 1) }},
	}
}

// visit loads one page, runs its check, saves its screenshot and fails
// on console problems or CSP violations.
func (d *driver) visit(p pageCheck) error {
	d.mu.Lock()
	d.problems = nil
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.PageTimeout+d.cfg.TapWithin)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(d.base+p.path))
	if err != nil {
		return fmt.Errorf("loading: %w", err)
	}
	var errs []error
	if resp != nil && resp.Status != http.StatusOK {
		errs = append(errs, fmt.Errorf("status %d", resp.Status))
	}
	if err := p.check(); err != nil {
		errs = append(errs, err)
	}
	if shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err != nil {
		errs = append(errs, fmt.Errorf("screenshot: %w", err))
	} else {
		file := filepath.Join(d.cfg.ArtifactsDir, "dashboard-"+p.name+".png")
		if err := os.WriteFile(file, shot, 0o644); err != nil {
			errs = append(errs, err)
		}
		d.res.Screenshots[p.name] = file
	}
	csp, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__csp || []`))
	if err != nil {
		errs = append(errs, fmt.Errorf("reading CSP violations: %w", err))
	}
	time.Sleep(200 * time.Millisecond) // console messages arrive on their own goroutine
	d.mu.Lock()
	problems := append(d.problems, csp...)
	d.mu.Unlock()
	for _, pr := range problems {
		errs = append(errs, errors.New(pr))
	}
	return errors.Join(errs...)
}

// waitCount waits until sel matches at least n elements.
func (d *driver) waitCount(sel string, n int) error {
	_, err := d.poll(d.cfg.PageTimeout, fmt.Sprintf(`document.querySelectorAll(%s).length`, strconv.Quote(sel)), func(got int) bool { return got >= n })
	if err != nil {
		return fmt.Errorf("want at least %d of %s: %w", n, sel, err)
	}
	return nil
}

// poll evaluates expr until ok accepts its value or within passes.
func (d *driver) poll(within time.Duration, expr string, ok func(int) bool) (int, error) {
	deadline := time.Now().Add(within)
	for {
		got, err := chromedp.Run(d.ctx, chromedp.Evaluate[int](expr))
		if err == nil && ok(got) {
			return got, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return got, err
			}
			return got, fmt.Errorf("found %d after %s", got, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *driver) checkWorkloads() error {
	if err := d.waitCount("#workloads tr.row", d.cfg.MinWorkloads); err != nil {
		return err
	}
	rows, err := chromedp.Run(d.ctx, chromedp.Evaluate[[]WorkloadRow](`(function () {
		const heads = Array.from(document.querySelectorAll('#workloads thead th')).map(function (th) { return th.textContent.trim(); });
		return Array.from(document.querySelectorAll('#workloads tr.row')).map(function (tr) {
			const cells = {};
			Array.from(tr.children).forEach(function (td, i) { cells[heads[i]] = td.textContent.trim(); });
			return {workload: tr.dataset.workload, cells: cells};
		});
	})()`))
	if err != nil {
		return fmt.Errorf("reading the workload table: %w", err)
	}
	for i := range rows {
		rows[i].SuccessRate = percent(rows[i].Cells["Success"])
		rows[i].RPS = number(rows[i].Cells["RPS"])
		rows[i].P50 = millis(rows[i].Cells["P50"])
		rows[i].P99 = millis(rows[i].Cells["P99"])
	}
	d.res.Workloads = rows
	return nil
}

func (d *driver) checkTopology() error {
	if err := d.waitCount("svg#topology g.edge", len(d.cfg.Edges)); err != nil {
		return err
	}
	edges, err := chromedp.Run(d.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('svg#topology g.edge')).map(function (g) {
		return g.dataset.source + ' → ' + g.dataset.destination + (g.dataset.secured === 'true' ? ' (mTLS)' : '');
	})`))
	if err != nil {
		return fmt.Errorf("reading the topology: %w", err)
	}
	d.res.Edges = edges
	var errs []error
	for _, want := range d.cfg.Edges {
		if !slices.ContainsFunc(edges, func(e string) bool {
			src, rest, _ := strings.Cut(e, " → ")
			return strings.HasSuffix(src, "/"+want[0]) && strings.HasSuffix(rest, "/"+want[1]+" (mTLS)")
		}) {
			errs = append(errs, fmt.Errorf("no secured edge %s → %s in the topology (it has %q)", want[0], want[1], edges))
		}
	}
	return errors.Join(errs...)
}

// checkTap waits for tap rows whose method, path and status are filled in.
func (d *driver) checkTap() error {
	n, err := d.poll(d.cfg.TapWithin, `Array.from(document.querySelectorAll('#tap-rows tr.tap-row')).filter(function (tr) {
		return tr.querySelector('.method').textContent !== '' && tr.querySelector('.path').textContent !== '' && tr.querySelector('.status').textContent !== '';
	}).length`, func(got int) bool { return got >= d.cfg.TapRows })
	d.res.TapRows = n
	if err != nil {
		status, _ := chromedp.Run(d.ctx, chromedp.Evaluate[string](`(document.getElementById('tap-status') || {}).textContent || ''`))
		return fmt.Errorf("want %d tap rows with a response within %s (status line %q): %w", d.cfg.TapRows, d.cfg.TapWithin, status, err)
	}
	if d.cfg.TapFromWorkload == "" {
		return nil
	}
	froms, err := chromedp.Run(d.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#tap-rows tr.tap-row')).map(function (tr) {
		return tr.children[3].textContent;
	})`))
	if err != nil {
		return fmt.Errorf("reading the tap rows' sources: %w", err)
	}
	for _, f := range froms {
		if f != d.cfg.TapFromWorkload {
			return fmt.Errorf("the tap view filtered on from %q shows a request from %q (want only %q)", d.cfg.TapFrom, f, d.cfg.TapFromWorkload)
		}
	}
	return nil
}

// forgedHost asks for the dashboard under a name it must refuse.
func forgedHost(ctx context.Context, base *url.URL) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+"/", nil)
	if err != nil {
		return err
	}
	req.Host = "evil.example.com"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("forged Host: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		return fmt.Errorf("forged Host evil.example.com: answered %s, want 403", res.Status)
	}
	return nil
}

// rebindPage loads the dashboard under another name in the browser, as a
// DNS-rebinding page would, and wants the refusal.
func (d *driver) rebindPage() error {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.PageTimeout)
	defer cancel()
	u, _ := url.Parse(d.base)
	host := rebindHost
	if p := u.Port(); p != "" {
		host = net.JoinHostPort(rebindHost, p)
	}
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(u.Scheme+"://"+host+"/"))
	if err != nil {
		return fmt.Errorf("loading the dashboard as %s: %w", host, err)
	}
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.textContent : ''`))
	if resp == nil || resp.Status != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") {
		status := int64(0)
		if resp != nil {
			status = resp.Status
		}
		return fmt.Errorf("the dashboard loaded as %s answered %d %q, want 403 naming DNS rebinding", host, status, body)
	}
	if shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		file := filepath.Join(d.cfg.ArtifactsDir, "dashboard-forged-host.png")
		if os.WriteFile(file, shot, 0o644) == nil {
			d.res.Screenshots["forged-host"] = file
		}
	}
	return nil
}

// percent reads "99.50%" as 0.995; "-" as nil.
func percent(s string) *float64 {
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || !strings.HasSuffix(s, "%") {
		return nil
	}
	f /= 100
	return &f
}

// millis reads "12 ms"; "-" as nil.
func millis(s string) *float64 {
	n, ok := strings.CutSuffix(s, " ms")
	if !ok {
		return nil
	}
	return number(n)
}

// number reads a plain figure; "-" as nil.
func number(s string) *float64 {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return nil
	}
	return &f
}
