package install

import (
	"reflect"
	"strings"
	"testing"
)

// TestReadConfigRoundTrip: the settings read back from what install
// rendered are the settings it rendered with.
func TestReadConfigRoundTrip(t *testing.T) {
	for name, cfg := range goldenCases() {
		if cfg.CRDsOnly {
			continue
		}
		if name == "custom" {
			cfg.DefaultInboundPolicy = "deny"
			cfg.ClusterNetworks = "10.244.0.0/16"
			cfg.ImageRegistry = "localhost:5000/mesh" // a registry with a port
		}
		t.Run(name, func(t *testing.T) {
			objs, err := testRenderer().Objects(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadConfig(installedOf(objs))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, cfg) {
				t.Errorf("read back\n%+v\nwant\n%+v", got, cfg)
			}
		})
	}
}

func TestReadConfigRefusesForeignImage(t *testing.T) {
	objs, err := testRenderer().Objects(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in := installedOf(objs)
	cs, _ := mapAt(in.Injector, "spec", "template", "spec")
	c := cs["containers"].([]any)[0].(object)
	c["args"] = []any{"--proxy-image=proxy"}
	if _, err := ReadConfig(in); err == nil || !strings.Contains(err.Error(), `"proxy"`) {
		t.Errorf("err = %v, want the image named", err)
	}
}

// installedOf picks from rendered objects what ReadConfig reads.
func installedOf(objs []map[string]any) Installed {
	var in Installed
	for _, o := range objs {
		switch describe(o) {
		case "Deployment plexus-system/plexus-destination":
			in.Destination = o
		case "Deployment plexus-system/plexus-injector":
			in.Injector = o
		case "DaemonSet plexus-system/plexus-node":
			in.NodeAgent = o
		case "PodDisruptionBudget plexus-system/plexus-destination":
			in.HA = true
		}
	}
	return in
}
