// Package compat pins the wire surface of the APIs proxies call — the
// discovery (destination) and identity APIs — so that proxies of the
// previous version keep working against this control plane (ARCHITECTURE.md
// §11: backward compatible across one minor version).
//
// testdata/<api>.previous.txt is the surface of the previous version
// (integration/cluster/versions.mk PREVIOUS_COMMIT), one line per
// message field, enum value and RPC. Every line must still be in the
// current surface: a field or method may be added, never removed,
// renumbered, retyped or renamed. When PREVIOUS_COMMIT moves, re-pin from
// a checkout of it with go test -pin.
package compat

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/api/identitypb"
)

var pin = flag.Bool("pin", false, "write the current surface as the previous version's")

// apis are the APIs proxies call.
var apis = map[string]protoreflect.FileDescriptor{
	"destination": destinationpb.File_mesh_api_destinationpb_destination_proto,
	"identity":    identitypb.File_mesh_api_identitypb_identity_proto,
}

// surface lists what a peer of another version relies on.
func surface(fd protoreflect.FileDescriptor) []string {
	var out []string
	var messages func(protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			fs := m.Fields()
			for j := range fs.Len() {
				f := fs.Get(j)
				typ := f.Kind().String()
				switch f.Kind() {
				case protoreflect.MessageKind, protoreflect.GroupKind:
					typ = string(f.Message().FullName())
				case protoreflect.EnumKind:
					typ = string(f.Enum().FullName())
				}
				card := f.Cardinality().String()
				if f.IsMap() {
					card = "map"
				}
				oneof := ""
				if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
					oneof = " oneof " + string(o.Name())
				}
				out = append(out, fmt.Sprintf("field %s.%s = %d %s %s%s", m.FullName(), f.Name(), f.Number(), card, typ, oneof))
			}
			enums(m.Enums(), &out)
			messages(m.Messages())
		}
	}
	messages(fd.Messages())
	enums(fd.Enums(), &out)
	ss := fd.Services()
	for i := range ss.Len() {
		s := ss.Get(i)
		ms := s.Methods()
		for j := range ms.Len() {
			m := ms.Get(j)
			out = append(out, fmt.Sprintf("rpc %s.%s(%s%s) returns (%s%s)", s.FullName(), m.Name(),
				stream(m.IsStreamingClient()), m.Input().FullName(), stream(m.IsStreamingServer()), m.Output().FullName()))
		}
	}
	slices.Sort(out)
	return out
}

func enums(es protoreflect.EnumDescriptors, out *[]string) {
	for i := range es.Len() {
		e := es.Get(i)
		vs := e.Values()
		for j := range vs.Len() {
			*out = append(*out, fmt.Sprintf("enum %s.%s = %d", e.FullName(), vs.Get(j).Name(), vs.Get(j).Number()))
		}
	}
}

func stream(b bool) string {
	if b {
		return "stream "
	}
	return ""
}

// missing is what of prev now lacks.
func missing(prev, now []string) []string {
	var out []string
	for _, line := range prev {
		if !slices.Contains(now, line) {
			out = append(out, line)
		}
	}
	return out
}

// TestBackwardCompatible: the previous version's surface is all still
// here.
func TestBackwardCompatible(t *testing.T) {
	for name, fd := range apis {
		t.Run(name, func(t *testing.T) {
			now := surface(fd)
			file := filepath.Join("testdata", name+".previous.txt")
			if *pin {
				if err := os.WriteFile(file, []byte(strings.Join(now, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			prev := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(prev) < 5 {
				t.Fatalf("%s pins only %d lines", file, len(prev))
			}
			for _, line := range missing(prev, now) {
				t.Errorf("the previous version's %q is gone or changed: its proxies would break", line)
			}
		})
	}
}

// TestSurfaceSeesChanges: a renumbered, retyped or removed field, and a
// method made streaming, are caught; an added field is not.
func TestSurfaceSeesChanges(t *testing.T) {
	now := surface(destinationpb.File_mesh_api_destinationpb_destination_proto)
	field := now[slices.IndexFunc(now, func(l string) bool { return strings.HasPrefix(l, "field ") && strings.Contains(l, " = 1 ") })]
	rpc := now[slices.IndexFunc(now, func(l string) bool { return strings.HasPrefix(l, "rpc ") })]
	change := func(old, new string) []string {
		c := slices.Clone(now)
		c[slices.Index(c, old)] = new
		return c
	}
	for what, changed := range map[string][]string{
		"renumbered":     change(field, strings.Replace(field, " = 1 ", " = 99 ", 1)),
		"retyped":        change(field, field+"x"),
		"removed":        slices.DeleteFunc(slices.Clone(now), func(l string) bool { return l == field }),
		"made streaming": change(rpc, strings.Replace(rpc, "(", "(stream ", 1)),
	} {
		if got := missing(now, changed); len(got) != 1 {
			t.Errorf("%s: missing %q, want the one changed line", what, got)
		}
	}
	if got := missing(now, append(slices.Clone(now), "field plexus.destination.v1.New.x = 1 optional string")); len(got) != 0 {
		t.Errorf("an added field: missing %q", got)
	}
}
