package h1diff

import (
	"os"
	"regexp"
	"testing"
)

// TestTables checks the case tables and that testdata/outcomes.md has a
// row for exactly the cases there are; it needs no root.
func TestTables(t *testing.T) {
	if len(smuggled) != 35 || len(nextB) != 28 {
		t.Errorf("the cases' lengths assume len(smuggled) == 35 and len(nextB) == 28, got %d and %d", len(smuggled), len(nextB))
	}
	if len(requestCases) < 60 || len(requestCases) >= nginxBase-goBase {
		t.Errorf("%d request cases, want 60 to %d", len(requestCases), nginxBase-goBase-1)
	}
	if len(responseCases) < 15 || scriptBase+len(responseCases) > crossPort {
		t.Errorf("%d response cases, want 15 to %d", len(responseCases), crossPort-scriptBase)
	}
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	keys := map[string]bool{"responses/" + crossName: true} // table/name, as outcomes.md has them
	add := func(table, name string) {
		key := table + "/" + name
		if !valid.MatchString(name) || keys[key] {
			t.Errorf("%s: duplicate name, or not [a-z0-9-]", key)
		}
		keys[key] = true
	}
	for _, c := range requestCases {
		add("requests", c.name)
		if len(c.want) == 0 {
			t.Errorf("%s: no intended request", c.name)
		}
	}
	for _, c := range responseCases {
		add("responses", c.name)
	}
	text, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("%v (go test ./sidecar/h1diff -update, as root, writes it)", err)
	}
	rows := parseGolden(string(text))
	for key := range keys {
		if rows[key] == nil {
			t.Errorf("%s has no row for %s (-update)", goldenFile, key)
		}
	}
	for key := range rows {
		if !keys[key] {
			t.Errorf("%s has a row for %s, which is no case (-update)", goldenFile, key)
		}
	}
}

// TestREADMECarriesTheOutcomes checks that sidecar/README.md shows the
// outcome tables of testdata/outcomes.md as they are; it needs no root.
func TestREADMECarriesTheOutcomes(t *testing.T) {
	golden, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := withOutcomes(string(readme), string(golden))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(readme) {
		t.Errorf("%s does not carry the tables of %s: run go test ./sidecar/h1diff -update (as root)", readmeFile, goldenFile)
	}
}
