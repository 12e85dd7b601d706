package balancerannotations

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseAccrual(t *testing.T) {
	def := Defaults()
	with := func(f func(*Accrual)) Accrual { a := def; f(&a); return a }
	on := map[string]string{AnnotationFailureAccrual: "consecutive"}
	plus := func(kv ...string) map[string]string {
		m := map[string]string{AnnotationFailureAccrual: "consecutive"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	anyErr := []string{}
	for _, tc := range []struct {
		name    string
		in      map[string]string
		want    Accrual
		enabled bool
		errs    []string // nil: no error; else each must appear in it
	}{
		{"none", nil, def, false, nil},
		{"others ignored", map[string]string{"retry.plexus.dev/http": "5xx"}, def, false, nil},
		{"on, defaults", on, def, true, nil},
		{"spaces trimmed", map[string]string{AnnotationFailureAccrual: " consecutive "}, def, true, nil},
		{"all set", plus(AnnotationMaxFailures, "3", AnnotationMinPenalty, "500ms", AnnotationMaxPenalty, "10s",
			AnnotationJitterRatio, "0.25", AnnotationMinHealthyPercent, "75"),
			Accrual{3, 500 * time.Millisecond, 10 * time.Second, 0.25, 75}, true, nil},
		{"percent sign", plus(AnnotationMinHealthyPercent, "30%"), with(func(a *Accrual) { a.MinHealthyPercent = 30 }), true, nil},
		{"edges", plus(AnnotationJitterRatio, "0", AnnotationMinHealthyPercent, "0", AnnotationMaxFailures, "1",
			AnnotationMinPenalty, "1m", AnnotationMaxPenalty, "1m"),
			Accrual{1, time.Minute, time.Minute, 0, 0}, true, nil},
		{"settings without the switch", map[string]string{AnnotationMaxFailures: "3"},
			with(func(a *Accrual) { a.ConsecutiveFailures = 3 }), false, nil},

		{"mode unknown", map[string]string{AnnotationFailureAccrual: "always"}, def, false, []string{`"consecutive"`}},
		{"mode case", map[string]string{AnnotationFailureAccrual: "Consecutive"}, def, false, anyErr},
		{"mode empty", map[string]string{AnnotationFailureAccrual: ""}, def, false, anyErr},
		{"failures zero", plus(AnnotationMaxFailures, "0"), def, true, []string{"at least 1"}},
		{"failures negative", plus(AnnotationMaxFailures, "-3"), def, true, anyErr},
		{"failures not a number", plus(AnnotationMaxFailures, "seven"), def, true, anyErr},
		{"failures fraction", plus(AnnotationMaxFailures, "1.5"), def, true, anyErr},
		{"failures too big", plus(AnnotationMaxFailures, "99999999999"), def, true, anyErr},
		{"failures empty", plus(AnnotationMaxFailures, ""), def, true, anyErr},
		{"min penalty no unit", plus(AnnotationMinPenalty, "1"), def, true, []string{"positive duration"}},
		{"min penalty zero", plus(AnnotationMinPenalty, "0s"), def, true, anyErr},
		{"min penalty negative", plus(AnnotationMinPenalty, "-1s"), def, true, anyErr},
		{"min penalty garbage", plus(AnnotationMinPenalty, "soon"), def, true, anyErr},
		{"max penalty zero", plus(AnnotationMaxPenalty, "0"), def, true, anyErr},
		{"max penalty garbage", plus(AnnotationMaxPenalty, "1 minute"), def, true, anyErr},
		{"min above max", plus(AnnotationMinPenalty, "10s", AnnotationMaxPenalty, "5s"), def, true,
			[]string{AnnotationMaxPenalty, `"5s"`}},
		{"min above default max", plus(AnnotationMinPenalty, "2m"), def, true, []string{"default max penalty 1m0s"}},
		{"max below default min", plus(AnnotationMaxPenalty, "500ms"), def, true, []string{"default min penalty 1s"}},
		{"jitter negative", plus(AnnotationJitterRatio, "-0.1"), def, true, []string{"[0, 1]"}},
		{"jitter above 1", plus(AnnotationJitterRatio, "1.5"), def, true, anyErr},
		{"jitter NaN", plus(AnnotationJitterRatio, "NaN"), def, true, anyErr},
		{"jitter Inf", plus(AnnotationJitterRatio, "Inf"), def, true, anyErr},
		{"jitter garbage", plus(AnnotationJitterRatio, "half"), def, true, anyErr},
		{"percent above 100", plus(AnnotationMinHealthyPercent, "101"), def, true, []string{"[0, 100]"}},
		{"percent negative", plus(AnnotationMinHealthyPercent, "-1"), def, true, anyErr},
		{"percent fraction", plus(AnnotationMinHealthyPercent, "50.5"), def, true, anyErr},
		{"percent garbage", plus(AnnotationMinHealthyPercent, "half"), def, true, anyErr},
		{"percent only a sign", plus(AnnotationMinHealthyPercent, "%"), def, true, anyErr},
		{"one bad among good", plus(AnnotationMaxFailures, "x", AnnotationMinPenalty, "2s"),
			with(func(a *Accrual) { a.MinPenalty = 2 * time.Second }), true, anyErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, enabled, err := ParseAccrual(tc.in)
			if got != tc.want || enabled != tc.enabled {
				t.Errorf("got %+v enabled %v, want %+v enabled %v", got, enabled, tc.want, tc.enabled)
			}
			if problem := outOfBounds(got); problem != "" {
				t.Errorf("returned %+v: %s", got, problem)
			}
			if tc.errs == nil {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			// The error names every malformed annotation and its value.
			for name, value := range tc.in {
				if name == AnnotationFailureAccrual && value == "consecutive" {
					continue
				}
				if _, _, e := ParseAccrual(map[string]string{name: value}); e != nil && !strings.Contains(err.Error(), name+": "+`"`+value+`"`) {
					t.Errorf("error %q does not name %s: %q", err, name, value)
				}
			}
			for _, s := range tc.errs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// outOfBounds names the first bound ParseAccrual promises that a
// breaks ("" for none); they are those sidecar/balance's
// AccrualConfig.Validate checks.
func outOfBounds(a Accrual) string {
	switch {
	case a.ConsecutiveFailures < 1:
		return "consecutive failures below 1"
	case a.MinPenalty <= 0:
		return "min penalty not positive"
	case a.MaxPenalty < a.MinPenalty:
		return "max penalty below min penalty"
	case !(a.JitterRatio >= 0 && a.JitterRatio <= 1):
		return "jitter ratio outside [0, 1]"
	case a.MinHealthyPercent < 0 || a.MinHealthyPercent > 100:
		return "min healthy percent outside [0, 100]"
	}
	return ""
}

func TestDefaults(t *testing.T) {
	want := Accrual{ConsecutiveFailures: 7, MinPenalty: time.Second, MaxPenalty: time.Minute, JitterRatio: 0.5, MinHealthyPercent: 50}
	if got := Defaults(); got != want {
		t.Errorf("Defaults() = %+v, want ARCHITECTURE.md §8's %+v", got, want)
	}
}

// TestStandardLibraryOnly keeps the contract importable from anywhere,
// the proxy and the CNI plugin included.
func TestStandardLibraryOnly(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if deps := strings.Fields(string(out)); len(deps) != 1 || !strings.HasSuffix(deps[0], "/mesh/api/balancerannotations") {
		t.Errorf("balancerannotations links more than the standard library: %v", deps)
	}
}

func TestParseZoneAware(t *testing.T) {
	preferClose, other := TrafficDistributionPreferClose, "PreferSameNode"
	for name, tc := range map[string]struct {
		annotations map[string]string
		td          *string
		want        bool
		wantErr     string
	}{
		"neither":                         {want: false},
		"PreferClose":                     {td: &preferClose, want: true},
		"another distribution":            {td: &other, want: false},
		"annotation on":                   {annotations: map[string]string{AnnotationZoneAware: "true"}, want: true},
		"annotation off over PreferClose": {annotations: map[string]string{AnnotationZoneAware: " false "}, td: &preferClose, want: false},
		"malformed, PreferClose applies":  {annotations: map[string]string{AnnotationZoneAware: "yes"}, td: &preferClose, want: true, wantErr: AnnotationZoneAware + `: "yes" is not`},
		"malformed, off":                  {annotations: map[string]string{AnnotationZoneAware: "1"}, want: false, wantErr: AnnotationZoneAware},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseZoneAware(tc.annotations, tc.td)
			if got != tc.want {
				t.Errorf("on = %v, want %v", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
