package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestInboundSourceFromEnv(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil || c.InboundSource != nil {
		t.Fatalf("unset: %v, %v; want no inbound source", c.InboundSource, err)
	}
	c, err = FromEnv(env(map[string]string{EnvInboundSource: "127.0.0.6,::1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.InboundSource); got != "[127.0.0.6 ::1]" {
		t.Errorf("inbound source %s, want [127.0.0.6 ::1]", got)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	_, err = FromEnv(env(map[string]string{EnvInboundSource: "10.0.0.6"}))
	if err == nil || !strings.Contains(err.Error(), EnvInboundSource) || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("non-loopback source: %v, want an error naming %s", err, EnvInboundSource)
	}
}
