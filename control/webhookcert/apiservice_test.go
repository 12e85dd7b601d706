package webhookcert

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestPatchAPIService: the caBundle of an APIService is patched when it
// differs, with the resourceVersion read, and left alone when equal.
func TestPatchAPIService(t *testing.T) {
	bundle := []byte("old")
	var patches []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != apiServicePath+"v1alpha1.tap.plexus.dev" {
			http.NotFound(w, r)
			return
		}
		switch r.Method {
		case http.MethodGet:
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "7"}, "spec": map[string]any{"caBundle": bundle}})
		case http.MethodPatch:
			b, _ := io.ReadAll(r.Body)
			var p map[string]any
			json.Unmarshal(b, &p)
			patches = append(patches, p)
			w.Write([]byte("{}"))
		}
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	k, err := New(Config{Namespace: "plexus-viz", Service: "plexus-tap", Secret: "plexus-tap-tls", APIService: "v1alpha1.tap.plexus.dev",
		Validity: 2, RenewBefore: 1, Log: slog.New(slog.DiscardHandler)}, client)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.patchCABundle(context.Background(), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if len(patches) != 1 {
		t.Fatalf("%d patches, want 1", len(patches))
	}
	meta := patches[0]["metadata"].(map[string]any)
	spec := patches[0]["spec"].(map[string]any)
	if meta["resourceVersion"] != "7" || spec["caBundle"] != "bmV3" { // base64 of "new"
		t.Errorf("patch = %v", patches[0])
	}
	bundle = []byte("new")
	if err := k.patchCABundle(context.Background(), []byte("new")); err != nil || len(patches) != 1 {
		t.Errorf("equal bundle: err %v, %d patches, want none more", err, len(patches))
	}
}
