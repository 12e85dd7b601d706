package inject

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestProxyCores(t *testing.T) {
	for limit, want := range map[string]int{"100m": 1, "1": 1, "1001m": 2, "1500m": 2, "3": 3, "1000": 64} {
		if got := proxyCores(resource.MustParse(limit)); got != want {
			t.Errorf("proxyCores(%s) = %d, want %d", limit, got, want)
		}
	}
}
