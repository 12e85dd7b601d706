package proxy

import (
	"io"
	"strings"
	"testing"
)

// TestRedirectProbe checks the readiness gate on the pod's rules: with
// PLEXUS_PROXY_REDIRECT_PROBE_PORT set, a pod whose inbound REDIRECT rule
// is missing refuses the probe port and reports not ready; once the rule
// is there, a probe to that port reaches the proxy and makes it ready.
func TestRedirectProbe(t *testing.T) {
	m := newTopology(t, false)
	env := "PLEXUS_PROXY_REDIRECT_PROBE_PORT=4192"
	get := func(from *pod, addr string) (int, string, error) {
		res, err := from.httpClient(false).Get("http://" + addr + "/ready")
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}

	// The client pod "missed its rules": a proxy runs, but nothing redirects.
	launchProxy(t, m.client.ns, false, env)
	if _, _, err := get(m.server, "10.250.5.1:4192"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("probe port without rules: err = %v, want connection refused", err)
	}
	code, body, err := get(m.server, "10.250.5.1:4191")
	if err != nil || code != 503 || !strings.Contains(body, "inbound redirect") {
		t.Errorf("/ready without rules = %d %q %v, want 503 naming the redirect", code, body, err)
	}

	// The server pod has its rules.
	withRules := launchProxy(t, m.server.ns, true, env)
	if code, _, err := get(m.client, serverIP+":4191"); err != nil || code != 503 {
		t.Errorf("/ready before any probe = %d %v, want 503", code, err)
	}
	if code, body, err := get(m.client, serverIP+":4192"); err != nil || code != 200 {
		t.Fatalf("probe through the redirect = %d %q %v, want 200", code, body, err)
	}
	if code, _, err := get(m.client, serverIP+":4191"); err != nil || code != 200 {
		t.Errorf("/ready after the probe = %d %v, want 200", code, err)
	}
	if got := sumSamples(withRules.scrape(t), "redirect_probe_total", nil); got != 1 {
		t.Errorf("redirect_probe_total = %v, want 1", got)
	}
	if got := sumSamples(withRules.scrape(t), "request_total", nil); got != 0 {
		t.Errorf("probe counted as proxied traffic: request_total = %v", got)
	}
}
