package agent

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestOwnerRemovedOnlyWhenTheDaemonSetGoes(t *testing.T) {
	now := metav1.Now()
	ds := func(deleting bool) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "plexus-system", Name: "plexus-node"}}
		if deleting {
			d.DeletionTimestamp = &now
			d.Finalizers = []string{"foregroundDeletion"}
		}
		return d
	}
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		apiErr  bool
		removed bool
	}{
		{"rolling update or restarted pod", []runtime.Object{ds(false)}, false, false},
		{"DaemonSet deleted", nil, false, true},
		{"DaemonSet being deleted (foreground)", []runtime.Object{ds(true)}, false, true},
		{"API unreachable", []runtime.Object{ds(false)}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.objs...)
			if tc.apiErr {
				c.PrependReactor("get", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			o := &Owner{Client: c, Namespace: "plexus-system", Name: "plexus-node"}
			removed, err := o.Removed(context.Background())
			if removed != tc.removed || (err != nil) != tc.apiErr {
				t.Errorf("Removed = %v, %v; want %v, error %v", removed, err, tc.removed, tc.apiErr)
			}
		})
	}
}
