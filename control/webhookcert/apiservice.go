package webhookcert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// apiServicePath is where the API server keeps APIService objects.
const apiServicePath = "/apis/apiregistration.k8s.io/v1/apiservices/"

// patchAPIService sets the APIService's caBundle to caPEM, if it differs.
// The APIService is read and patched through the discovery client's REST
// client, which reaches any path: no aggregator clientset is needed for
// one field.
func (k *Keeper) patchAPIService(ctx context.Context, caPEM []byte) error {
	rc := k.restClient()
	if rc == nil {
		return fmt.Errorf("no REST client to patch APIService %s", k.cfg.APIService)
	}
	raw, err := rc.Get().AbsPath(apiServicePath + k.cfg.APIService).Do(ctx).Raw()
	if err != nil {
		return fmt.Errorf("reading APIService %s: %w", k.cfg.APIService, err)
	}
	var cur struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			CABundle []byte `json:"caBundle"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &cur); err != nil {
		return fmt.Errorf("reading APIService %s: %w", k.cfg.APIService, err)
	}
	if bytes.Equal(cur.Spec.CABundle, caPEM) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": cur.Metadata.ResourceVersion},
		"spec":     map[string]any{"caBundle": caPEM},
	})
	if err := rc.Patch(types.MergePatchType).AbsPath(apiServicePath + k.cfg.APIService).Body(patch).Do(ctx).Error(); err != nil {
		return fmt.Errorf("patching the caBundle of APIService %s: %w", k.cfg.APIService, err)
	}
	k.cfg.Log.Info("APIService caBundle updated", "apiService", k.cfg.APIService)
	return nil
}

// restClient is the client's generic REST client; nil for fakes.
func (k *Keeper) restClient() rest.Interface {
	d := k.client.Discovery()
	if d == nil {
		return nil
	}
	rc := d.RESTClient()
	if rc == nil {
		return nil
	}
	if c, ok := rc.(*rest.RESTClient); ok && c == nil {
		return nil
	}
	return rc
}
