package deploy_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// compose is the part of docker-compose.yml these tests read.
type compose struct {
	Services map[string]struct {
		Ports       []yaml.Node       `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) compose {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "docker-compose.yml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(c.Services) == 0 {
		t.Fatalf("%s has no services", path)
	}
	return c
}

// publishedHost is the host IP a port entry publishes on: "" for every
// interface. It reads both syntaxes: "[HOST:]HOST_PORT:CONTAINER_PORT[/proto]"
// (or a bare "CONTAINER_PORT", published on a random host port of every
// interface) and the long form's host_ip.
func publishedHost(n yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		spec, _, _ := strings.Cut(n.Value, "/")
		// An IPv6 host is bracketed: "[::1]:8233:8080".
		if strings.HasPrefix(spec, "[") {
			end := strings.Index(spec, "]")
			if end < 0 {
				return "", fmt.Errorf("unreadable port %q", n.Value)
			}
			return spec[1:end], nil
		}
		parts := strings.Split(spec, ":")
		switch len(parts) {
		case 1, 2:
			return "", nil
		case 3:
			return parts[0], nil
		}
		return "", fmt.Errorf("unreadable port %q", n.Value)
	case yaml.MappingNode:
		var long struct {
			HostIP string `yaml:"host_ip"`
		}
		if err := n.Decode(&long); err != nil {
			return "", err
		}
		return long.HostIP, nil
	}
	return "", fmt.Errorf("unreadable port entry at line %d", n.Line)
}

// TestComposePublishesOnLoopbackOnly: every port docker-compose.yml
// publishes on the host is bound to a loopback address. Temporal's
// frontend and UI, Prometheus and Grafana have no authentication here;
// published on every interface they hand the pool to anyone who can reach
// the machine (docs/configuration.md: "Exposing a pool").
func TestComposePublishesOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	published := 0
	for name, svc := range readCompose(t).Services {
		for _, p := range svc.Ports {
			published++
			host, err := publishedHost(p)
			if err != nil {
				t.Errorf("service %s: %v", name, err)
				continue
			}
			where := strconv.Quote(p.Value)
			if host = strings.TrimSpace(host); host == "" {
				t.Errorf("service %s publishes %s on every interface; bind it to 127.0.0.1 (\"127.0.0.1:HOST:CONTAINER\")", name, where)
				continue
			}
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				t.Errorf("service %s publishes %s on %s, not a loopback address", name, where, host)
			}
		}
	}
	if published == 0 {
		t.Fatal("docker-compose.yml publishes no port: the test read nothing")
	}
}

func TestPublishedHostReadsBothSyntaxes(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{
		`"7233:7233"`:                   "",
		`"9090"`:                        "",
		`"127.0.0.1:8233:8080"`:         "127.0.0.1",
		`"127.0.0.1:3000:3000/tcp"`:     "127.0.0.1",
		`"[::1]:9090:9090"`:             "::1",
		`{target: 80, published: 8080}`: "",
		`{target: 80, host_ip: 127.0.0.1, published: 8080}`: "127.0.0.1",
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(spec), &n); err != nil {
			t.Fatal(err)
		}
		got, err := publishedHost(*n.Content[0])
		if err != nil || got != want {
			t.Errorf("publishedHost(%s) = %q, %v; want %q", spec, got, err, want)
		}
	}
}
