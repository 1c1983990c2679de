package deploy

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

var update = flag.Bool("update", false, "write deploy/manifests/triage.yaml from the chart's default rendering")

const (
	// helmVersion is the helm scripts/install-helm.sh installs.
	helmVersion = "v4.1.4"
	// release is the release name of the checked-in rendering.
	release = "triage"
	// regenerate is the command that writes the manifests again.
	regenerate = "go test ./deploy -run TestManifests -update"
)

func chartDir() string { return filepath.Join(testenv.Root(), "deploy", "helm", "triage") }
func manifestPath() string {
	return filepath.Join(testenv.Root(), "deploy", "manifests", "triage.yaml")
}

// helm is the helm binary: $HELM, else var/bin/helm, which must be the
// version scripts/install-helm.sh pins. Without it the test fails: the
// chart is part of what make test checks.
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	p := filepath.Join(testenv.Root(), "var", "bin", "helm")
	info, err := buildinfo.ReadFile(p)
	if err != nil {
		t.Fatalf("helm %s is needed at %s (%v): run bash scripts/install-helm.sh (make test does), or set HELM to a helm binary", helmVersion, p, err)
	}
	if info.Main.Version != helmVersion {
		t.Fatalf("%s is helm %s, not %s: run bash scripts/install-helm.sh (make test does)", p, info.Main.Version, helmVersion)
	}
	return p
}

// render runs helm template on the chart with args (-f FILE, --set K=V),
// returning what it printed or an error holding its stderr.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm(t), append([]string{"template", release, chartDir()}, args...)...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func mustRender(t *testing.T, args ...string) *objects {
	t.Helper()
	out, err := render(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// objects are the rendered objects, each decoded into its type.
type objects struct {
	Deployments     map[string]*appsv1.Deployment
	Services        map[string]*corev1.Service
	ConfigMaps      map[string]*corev1.ConfigMap
	PDBs            map[string]*policyv1.PodDisruptionBudget
	HPAs            map[string]*autoscalingv2.HorizontalPodAutoscaler
	ServiceMonitors map[string]*serviceMonitor
	Secrets         map[string]*corev1.Secret
	NetworkPolicies map[string]*networkingv1.NetworkPolicy
	kinds           []string // "Kind/name", in rendering order
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// the chart writes (the Prometheus Operator's types are not in
// k8s.io/api); decoding it strictly catches a misspelt field the chart
// might write.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			TLSConfig     *struct {
				CA *struct {
					Secret    *corev1.SecretKeySelector    `json:"secret"`
					ConfigMap *corev1.ConfigMapKeySelector `json:"configMap"`
				} `json:"ca"`
				ServerName         string `json:"serverName"`
				InsecureSkipVerify bool   `json:"insecureSkipVerify"`
			} `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode splits helm's output into documents and decodes each strictly
// (sigs.k8s.io/yaml to JSON, then encoding/json with unknown fields
// refused) into the k8s.io/api type of its apiVersion and kind.
func decode(t *testing.T, out string) *objects {
	t.Helper()
	o := &objects{
		Deployments: map[string]*appsv1.Deployment{}, Services: map[string]*corev1.Service{},
		ConfigMaps: map[string]*corev1.ConfigMap{}, PDBs: map[string]*policyv1.PodDisruptionBudget{},
		HPAs: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, ServiceMonitors: map[string]*serviceMonitor{},
		Secrets: map[string]*corev1.Secret{}, NetworkPolicies: map[string]*networkingv1.NetworkPolicy{},
	}
	for i, doc := range docSep.Split(out, -1) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("document %d is not YAML: %v\n%s", i, err, doc)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "{}" {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		var name func() string
		switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
		case "apps/v1 Deployment":
			v := &appsv1.Deployment{}
			obj, name = v, func() string { o.Deployments[v.Name] = v; return v.Name }
		case "v1 Service":
			v := &corev1.Service{}
			obj, name = v, func() string { o.Services[v.Name] = v; return v.Name }
		case "v1 ConfigMap":
			v := &corev1.ConfigMap{}
			obj, name = v, func() string { o.ConfigMaps[v.Name] = v; return v.Name }
		case "policy/v1 PodDisruptionBudget":
			v := &policyv1.PodDisruptionBudget{}
			obj, name = v, func() string { o.PDBs[v.Name] = v; return v.Name }
		case "autoscaling/v2 HorizontalPodAutoscaler":
			v := &autoscalingv2.HorizontalPodAutoscaler{}
			obj, name = v, func() string { o.HPAs[v.Name] = v; return v.Name }
		case "v1 Secret":
			v := &corev1.Secret{}
			obj, name = v, func() string { o.Secrets[v.Name] = v; return v.Name }
		case "networking.k8s.io/v1 NetworkPolicy":
			v := &networkingv1.NetworkPolicy{}
			obj, name = v, func() string { o.NetworkPolicies[v.Name] = v; return v.Name }
		case "monitoring.coreos.com/v1 ServiceMonitor":
			v := &serviceMonitor{}
			obj, name = v, func() string { o.ServiceMonitors[v.Name] = v; return v.Name }
		default:
			t.Fatalf("document %d is a %q, which the test does not know: add its type\n%s", i, gvk, doc)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			t.Fatalf("%s: %v\n%s", tm.Kind, err, doc)
		}
		if dec.More() {
			t.Fatalf("%s: more than one object in a document", tm.Kind)
		}
		n := name()
		if n == "" {
			t.Fatalf("a %s without a name", tm.Kind)
		}
		o.kinds = append(o.kinds, tm.Kind+"/"+n)
	}
	return o
}

// gateway is the release's gateway Deployment and its container.
func (o *objects) gateway(t *testing.T) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := o.Deployments[release]
	if d == nil {
		t.Fatalf("no Deployment %q among %v", release, o.kinds)
	}
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "triage" {
			return d, c
		}
	}
	t.Fatalf("Deployment %s has no container named triage", d.Name)
	return nil, nil
}

// configFiles writes the ConfigMap's files into a new directory, laid out
// as the kubelet mounts a ConfigMap (see configVolume), and returns the
// triage.yaml there.
func (o *objects) configFiles(t *testing.T) (dir string, data map[string]string) {
	t.Helper()
	cm := o.ConfigMaps[release+"-config"]
	if cm == nil {
		t.Fatalf("no ConfigMap %s-config among %v", release, o.kinds)
	}
	v := newConfigVolume(t)
	v.write(t, cm.Data)
	return v.dir, cm.Data
}

// loadConfig loads the ConfigMap's triage.yaml with the gateway's own
// loader.
func (o *objects) loadConfig(t *testing.T) *config.Config {
	t.Helper()
	dir, _ := o.configFiles(t)
	c, err := config.Load(filepath.Join(dir, "triage.yaml"))
	if err != nil {
		t.Fatalf("the gateway refuses the chart's triage.yaml: %v", err)
	}
	return c
}

// labelsMatch reports whether selector's labels are all in labels.
func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestDefaultRenderDecodes(t *testing.T) {
	o := mustRender(t)
	want := []string{"ConfigMap/triage-config", "Service/triage", "Deployment/triage"}
	if !slices.Equal(o.kinds, want) {
		t.Errorf("default values render %v, want %v (the optional parts are off by default)", o.kinds, want)
	}
	d, _ := o.gateway(t)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	svc := o.Services[release]
	pod := d.Spec.Template.Labels
	if !labelsMatch(svc.Spec.Selector, pod) || !labelsMatch(d.Spec.Selector.MatchLabels, pod) {
		t.Errorf("the Service's selector %v or the Deployment's %v does not select the pods' labels %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels, pod)
	}
	if len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].TargetPort.StrVal != "http" || svc.Spec.Ports[1].TargetPort.StrVal != "metrics" || svc.Spec.Ports[1].Port != 9090 {
		t.Errorf("Service ports %+v, want one targeting the container port named http, one metrics on 9090", svc.Spec.Ports)
	}
}

func TestDeploymentProbesSecurityAndShutdown(t *testing.T) {
	o := mustRender(t)
	d, c := o.gateway(t)
	pod := d.Spec.Template.Spec

	if len(c.Ports) != 2 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 || c.Ports[1].Name != "metrics" || c.Ports[1].ContainerPort != 9090 {
		t.Errorf("container ports %+v, want http on 8080, metrics on 9090", c.Ports)
	}
	// /metrics apart: the gateway is told to serve it there.
	var metricsAt string
	for _, e := range c.Env {
		if e.Name == "TRIAGE_SERVER__METRICS_LISTEN" {
			metricsAt = e.Value
		}
	}
	if metricsAt != "0.0.0.0:9090" {
		t.Errorf("TRIAGE_SERVER__METRICS_LISTEN = %q, want 0.0.0.0:9090", metricsAt)
	}
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: %+v, want GET %s", what, p, path)
			return
		}
		if p.HTTPGet.Path != path || p.HTTPGet.Port.StrVal != "http" || p.HTTPGet.Scheme != corev1.URISchemeHTTP {
			t.Errorf("%s probe: %s %s on port %v, want HTTP %s on port http", what, p.HTTPGet.Scheme, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
		}
		if p.PeriodSeconds < 1 || p.TimeoutSeconds < 1 || p.FailureThreshold < 1 {
			t.Errorf("%s probe: period %d, timeout %d, failures %d", what, p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz?upstreams=ignore") // gateways stay in the Service while vLLM is down

	// Non-root, read-only, nothing to escalate to, no capabilities: the
	// gateway and the init container alike.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a numeric non-root runAsUser", psc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token; the gateway never talks to the API server")
	}
	containers := append(slices.Clone(pod.InitContainers), pod.Containers...)
	if len(pod.InitContainers) != 1 {
		t.Errorf("%d init containers, want the one copying the model files (models.source: image)", len(pod.InitContainers))
	}
	for _, ct := range containers {
		sc := ct.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: no securityContext", ct.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: root filesystem writable", ct.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: privilege escalation allowed", ct.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s: capabilities %+v, want drop [ALL]", ct.Name, sc.Capabilities)
		}
	}
	checkWritable(t, d)

	// Shutdown: preStop sleep, then the gateway's drain
	// (server.shutdown_timeout), inside the grace period.
	cfg := o.loadConfig(t)
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("lifecycle %+v: want a preStop sleep (the image has no shell)", c.Lifecycle)
	}
	sleep := c.Lifecycle.PreStop.Sleep.Seconds
	grace := *pod.TerminationGracePeriodSeconds
	drain := int64(cfg.Server.ShutdownTimeout / time.Second)
	if sleep != 5 || drain != 30 || grace != 40 {
		t.Errorf("preStop sleep %ds, shutdown_timeout %ds, grace %ds; want 5, 30 (the gateway's default) and 40", sleep, drain, grace)
	}

	for k := range d.Spec.Template.Annotations {
		if strings.HasPrefix(k, "checksum/") {
			t.Errorf("pod template annotation %s: a config edit would restart the pods instead of reloading them", k)
		}
	}

	// The config: the ConfigMap as a directory (a subPath mount never
	// sees an update), named by --config.
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.Name == "config" {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || mount.SubPath != "" || mount.SubPathExpr != "" || !mount.ReadOnly {
		t.Fatalf("config mount %+v: want the whole ConfigMap, read-only, no subPath", mount)
	}
	if !slices.Contains(c.Args, filepath.Join(mount.MountPath, "triage.yaml")) {
		t.Errorf("args %v do not name %s/triage.yaml", c.Args, mount.MountPath)
	}
	if vol := volume(d, "config"); vol.ConfigMap == nil || vol.ConfigMap.Name != release+"-config" || len(vol.ConfigMap.Items) > 0 {
		t.Errorf("config volume %+v, want all of ConfigMap %s-config", vol, release)
	}
	if filepath.Dir(cfg.RulesPath()) != filepath.Dir(cfg.Path) {
		t.Errorf("rules %s is not beside triage.yaml in the ConfigMap's directory", cfg.RulesPath())
	}

	// The models: copied by the init container into the volume the
	// gateway reads as $TRIAGE_MODELS (/models, as the Dockerfile says).
	init := pod.InitContainers[0]
	if vol := volume(d, "models"); vol.EmptyDir == nil {
		t.Errorf("models volume %+v, want an emptyDir", vol)
	}
	if env(c, "TRIAGE_MODELS") != "/models" || mountPath(c.VolumeMounts, "models") != "/models" {
		t.Errorf("TRIAGE_MODELS=%q, models mounted at %q; want /models", env(c, "TRIAGE_MODELS"), mountPath(c.VolumeMounts, "models"))
	}
	if dst := mountPath(init.VolumeMounts, "models"); dst == "" || !slices.Contains(init.Command, dst+"/") {
		t.Errorf("init container %v does not copy into the models volume (%q)", init.Command, dst)
	}

	// Resources: requests and limits set, memory limit above the request.
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if req.IsZero() || lim.IsZero() || lim.Cmp(*req) < 0 || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit at least the request", c.Resources)
	}
}

// checkWritable fails t for a volume mounted writable that is not an
// emptyDir: the pod writes only to scratch it owns.
func checkWritable(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	for _, ct := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, m := range ct.VolumeMounts {
			if !m.ReadOnly && volume(d, m.Name).EmptyDir == nil {
				t.Errorf("%s: %s mounted writable at %s, and it is not an emptyDir", ct.Name, m.Name, m.MountPath)
			}
		}
	}
}

func volume(d *appsv1.Deployment, name string) corev1.Volume {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}

func mountPath(mounts []corev1.VolumeMount, name string) string {
	for _, m := range mounts {
		if m.Name == name {
			return m.MountPath
		}
	}
	return ""
}

func env(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// The drain and the grace period come from shutdown.drainSeconds alone.
func TestShutdownFromOneValue(t *testing.T) {
	o := mustRender(t, "--set", "shutdown.drainSeconds=120,shutdown.preStopSeconds=10,shutdown.exitSeconds=3")
	d, c := o.gateway(t)
	cfg := o.loadConfig(t)
	if got := cfg.Server.ShutdownTimeout; got != 120*time.Second {
		t.Errorf("server.shutdown_timeout %s, want 2m0s", got)
	}
	if got := c.Lifecycle.PreStop.Sleep.Seconds; got != 10 {
		t.Errorf("preStop sleep %ds, want 10", got)
	}
	if got := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 133 {
		t.Errorf("terminationGracePeriodSeconds %d, want 10 + 120 + 3", got)
	}
}

// The ConfigMap's files are ones the gateway accepts: triage.yaml through
// the gateway's config loader, rules.yaml through the rules parser, its
// pools the config's, its heads the image's.
func TestShippedConfigAccepted(t *testing.T) {
	o := mustRender(t)
	cfg := o.loadConfig(t)
	f, err := rules.ParseFile(cfg.RulesPath())
	if err != nil {
		t.Fatalf("the chart's rules.yaml: %v", err)
	}
	pools := cfg.PoolNames()
	if !pools[f.Default] || !pools[cfg.DefaultPool] {
		t.Errorf("rules default %q, config default_pool %q: not among the pools %v", f.Default, cfg.DefaultPool, pools)
	}
	for _, r := range f.Routes {
		if !pools[r.Pool] || r.Fallback != "" && !pools[r.Fallback] {
			t.Errorf("route %s: pool %q or fallback %q is not a pool of triage.yaml", r.Name, r.Pool, r.Fallback)
		}
	}
	imageHeads(t, f.Heads)

	// The rules are the repository's rules.yaml (its floors are fitted on
	// the subjects data), but for heads.
	_, data := o.configFiles(t)
	var shipped, repo map[string]any
	if err := yaml.Unmarshal([]byte(data["rules.yaml"]), &shipped); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(testenv.Root(), "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &repo); err != nil {
		t.Fatal(err)
	}
	repo["heads"] = shipped["heads"]
	if !reflect.DeepEqual(shipped, repo) {
		t.Errorf("config.rules in values.yaml is not rules.yaml (heads aside): update the chart's copy\nchart: %v\nrepo:  %v", shipped, repo)
	}
}

// imageHeads checks that heads, a path in the image, is a heads artifact
// the Dockerfile copies there (COPY models/heads /etc/triage/models/heads),
// and returns the repository's copy.
func imageHeads(t *testing.T, heads string) string {
	t.Helper()
	df, err := os.ReadFile(filepath.Join(testenv.Root(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^COPY models/heads /etc/triage/models/heads\s*$`).Match(df) {
		t.Fatal("the Dockerfile no longer copies models/heads to /etc/triage/models/heads, where the chart's rules look for the heads")
	}
	rel, ok := strings.CutPrefix(heads, "/etc/triage/models/heads/")
	if !ok {
		t.Fatalf("rules heads %q is not under the image's /etc/triage/models/heads", heads)
	}
	local := filepath.Join(testenv.Root(), "models", "heads", rel)
	if _, err := os.Stat(filepath.Join(local, "heads.json")); err != nil {
		t.Fatalf("rules heads %q: the image would have no %s/heads.json: %v", heads, local, err)
	}
	return local
}

// binDir holds the gateway triageBinary built, removed by TestMain.
var binDir string

// triageBinary builds the gateway once (pure Go: tier 1, as
// CGO_ENABLED=0 go build ./... does).
var triageBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "deploy-triage-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "triage")
	cmd := exec.Command("go", "build", "-tags", "nomsgpack", "-o", bin, "./cmd/triage")
	cmd.Dir = testenv.Root()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/triage: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// gatewayFiles lays the ConfigMap's files out as the pod sees them, with
// the image's heads path pointed at the repository's copy and the replica
// URLs at loopback ports where nothing listens (the test sends nothing off
// this machine), and returns the volume and the models directory.
func gatewayFiles(t *testing.T, data map[string]string) (*configVolume, string) {
	t.Helper()
	models := testenv.Models(t, "tables/subjects-tier1.tbl", "tokenizer/bert-base-uncased.json")
	f, err := rules.Parse("rules.yaml", []byte(data["rules.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	local := imageHeads(t, f.Heads)
	data = mapsClone(data)
	data["rules.yaml"] = strings.Replace(data["rules.yaml"], "heads: "+f.Heads, "heads: "+local, 1)
	port := 0
	data["triage.yaml"] = regexp.MustCompile(`url: \S+`).ReplaceAllStringFunc(data["triage.yaml"], func(string) string {
		port++
		return fmt.Sprintf("url: http://127.0.0.1:%d", port)
	})
	v := newConfigVolume(t)
	v.write(t, data)
	return v, models
}

func mapsClone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// The whole gateway accepts the shipped config (serve --check: pools,
// rules compiled against them and the heads, tier 1 loaded).
func TestShippedConfigServeCheck(t *testing.T) {
	o := mustRender(t)
	_, data := o.configFiles(t)
	v, models := gatewayFiles(t, data)
	bin, err := triageBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(v.dir, "triage.yaml"), "--check")
	cmd.Env = append(os.Environ(), "TRIAGE_MODELS="+models)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok (3 pools; rules ") {
		t.Fatalf("triage serve --check on the chart's config: %v\n%s", err, out)
	}
}

// configVolume lays files out as the kubelet does for a ConfigMap volume
// (its AtomicWriter): each version in a timestamped directory, a ..data
// symlink to the current one, and each file a symlink through ..data. An
// update writes a new directory, points ..data_tmp at it and renames that
// over ..data, then removes the old directory.
type configVolume struct {
	dir string
	gen int
	cur string
}

func newConfigVolume(t *testing.T) *configVolume { return &configVolume{dir: t.TempDir()} }

func (v *configVolume) write(t *testing.T, files map[string]string) {
	t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%09d", v.gen%60, v.gen)
	must := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(v.dir, ts), 0o755))
	for name, content := range files {
		must(os.WriteFile(filepath.Join(v.dir, ts, name), []byte(content), 0o644))
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	must(os.Symlink(ts, tmp))
	must(os.Rename(tmp, filepath.Join(v.dir, "..data")))
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			must(os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if v.cur != "" {
		must(os.RemoveAll(filepath.Join(v.dir, v.cur)))
	}
	v.cur = ts
}

// An edit to the ConfigMap reaches a running gateway as the kubelet
// delivers it (the ..data swap) and is applied without a restart; an
// invalid one is refused and the running config stays; SIGTERM drains
// and exits 0.
func TestConfigMapUpdateReloads(t *testing.T) {
	o := mustRender(t)
	_, data := o.configFiles(t)
	v, models := gatewayFiles(t, data)
	bin, err := triageBinary()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, c := o.gateway(t)
	args := slices.Clone(c.Args) // the chart's, but on loopback and in the test's directory
	for i := range args {
		switch {
		case strings.HasSuffix(args[i], "/triage.yaml"):
			args[i] = filepath.Join(v.dir, "triage.yaml")
		case i > 0 && args[i-1] == "--listen":
			args[i] = addr
		}
	}
	var logs testenv.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TRIAGE_MODELS="+models)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	exited := make(chan struct{})
	go func() { exitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	version := func() string {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var body struct {
			ConfigVersion json.RawMessage `json:"config_version"`
		}
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &body)
		return string(body.ConfigVersion)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s\ngateway log:\n%s", what, logs.String())
			}
			select {
			case <-exited:
				t.Fatalf("the gateway exited (%v) while waiting: %s\n%s", exitErr, what, logs.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	var first string
	waitFor("the gateway answers /readyz", func() bool { first = version(); return first != "" })

	// Another alias for the general pool: a new config version.
	edited := mapsClone(v.files(t))
	edited["triage.yaml"] = strings.Replace(edited["triage.yaml"], "- gpt-4o-mini", "- gpt-4o-mini\n  - gpt-4.1-mini", 1)
	if edited["triage.yaml"] == v.files(t)["triage.yaml"] {
		t.Fatal("the edit did not apply: the rendered triage.yaml has no alias gpt-4o-mini")
	}
	v.write(t, edited)
	var second string
	waitFor("the edited ConfigMap is applied", func() bool { second = version(); return second != "" && second != first })
	resp, err := http.Get("http://" + addr + "/v1/models/gpt-4.1-mini")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/models/gpt-4.1-mini after the reload: %d, want 200", resp.StatusCode)
	}

	// An invalid edit: refused, the config in effect stays.
	bad := mapsClone(edited)
	bad["triage.yaml"] += "\nlimits: {max_body_bytes: -1}\n"
	v.write(t, bad)
	waitFor("the invalid ConfigMap is refused", func() bool { return strings.Contains(logs.String(), "config reload rejected") })
	if got := version(); got != second {
		t.Errorf("config version %q after an invalid edit, want %q kept", got, second)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Errorf("after SIGTERM the gateway exited with %v, want 0\n%s", exitErr, logs.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("the gateway did not exit within 40s of SIGTERM\n%s", logs.String())
	}
}

// files reads back the current version's files.
func (v *configVolume) files(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(v.dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(v.dir, "..data", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// Every example values file renders objects that decode strictly, and
// its config is one the gateway loads.
func TestExampleValues(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(), "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example values in %s/ci: %v", chartDir(), err)
	}
	t.Setenv("REDIS_PASSWORD", "from-a-secret") // external-values.yaml's password_env, which the loader reads
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			o := mustRender(t, "-f", f)
			d, _ := o.gateway(t)
			checkWritable(t, d)
			o.loadConfig(t)
		})
	}
}

// ci/full-values.yaml: access with keys from a Secret, budgets in the
// writable directory, the chart's Redis, PDB, HPA and ServiceMonitor.
func TestFullValues(t *testing.T) {
	o := mustRender(t, "-f", filepath.Join(chartDir(), "ci", "full-values.yaml"))
	d, c := o.gateway(t)
	t.Setenv("REDIS_PASSWORD", "from-the-generated-secret") // what the pod's env gets from the Secret
	cfg := o.loadConfig(t)
	pod := d.Spec.Template.Labels

	if d.Spec.Replicas != nil {
		t.Errorf("replicas %d set while the HPA scales the Deployment", *d.Spec.Replicas)
	}
	hpa := o.HPAs[release]
	if hpa == nil || hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != d.Name ||
		len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Resource == nil || hpa.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
		t.Errorf("HPA %+v: want CPU scaling of Deployment %s", hpa, d.Name)
	}

	// Redis: its own Deployment and Service, which the gateway's pods'
	// selectors must not catch, at the address the config names.
	rd, rs := o.Deployments[release+"-redis"], o.Services[release+"-redis"]
	if rd == nil || rs == nil {
		t.Fatalf("no Redis Deployment and Service among %v", o.kinds)
	}
	if want := rs.Name + ":6379"; cfg.Access.Redis.Addr != want || rs.Spec.Ports[0].Port != 6379 {
		t.Errorf("access.redis.addr %q, Redis Service port %d; want %s", cfg.Access.Redis.Addr, rs.Spec.Ports[0].Port, want)
	}
	redisPod := rd.Spec.Template.Labels
	if !labelsMatch(rs.Spec.Selector, redisPod) || labelsMatch(rs.Spec.Selector, pod) {
		t.Errorf("Redis Service selector %v: want the Redis pods %v only", rs.Spec.Selector, redisPod)
	}
	// The encoder service's pods: neither the gateway's selectors nor
	// Redis's catch them, nor do the encoder's catch theirs.
	ed, es := o.Deployments[release+"-encoder"], o.Services[release+"-encoder"]
	if ed == nil || es == nil || o.HPAs[release+"-encoder"] == nil || o.ServiceMonitors[release+"-encoder"] == nil {
		t.Fatalf("no encoder Deployment, Service, HPA and ServiceMonitor among %v", o.kinds)
	}
	encPod := ed.Spec.Template.Labels
	if !labelsMatch(es.Spec.Selector, encPod) || labelsMatch(es.Spec.Selector, pod) || labelsMatch(es.Spec.Selector, redisPod) ||
		labelsMatch(rs.Spec.Selector, encPod) {
		t.Errorf("encoder Service selector %v: want the encoder's pods %v only", es.Spec.Selector, encPod)
	}
	for what, sel := range map[string]map[string]string{
		"gateway Service": o.Services[release].Spec.Selector, "gateway Deployment": d.Spec.Selector.MatchLabels,
		"PDB": o.PDBs[release].Spec.Selector.MatchLabels,
	} {
		if !labelsMatch(sel, pod) || labelsMatch(sel, redisPod) || labelsMatch(sel, encPod) {
			t.Errorf("%s selector %v: want the gateway's pods %v, not Redis's %v or the encoder's %v", what, sel, pod, redisPod, encPod)
		}
	}
	if rc := rd.Spec.Template.Spec.Containers[0].SecurityContext; rc == nil || !*rc.ReadOnlyRootFilesystem {
		t.Errorf("Redis container securityContext %+v: want a read-only root", rc)
	}
	checkWritable(t, rd)

	// The budgets' state and the usage log in the writable directory.
	data := mountPath(c.VolumeMounts, "data")
	if data == "" || volume(d, "data").EmptyDir == nil {
		t.Fatalf("no writable data emptyDir mounted: %+v", c.VolumeMounts)
	}
	for _, f := range []string{cfg.Access.StateFile, cfg.Access.UsageLog} {
		if !strings.HasPrefix(f, data+"/") {
			t.Errorf("%s is not under the writable %s", f, data)
		}
	}

	if pdb := o.PDBs[release]; pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB %+v: want minAvailable 1", pdb.Spec)
	}

	sm := o.ServiceMonitors[release]
	if sm == nil {
		t.Fatalf("no ServiceMonitor among %v", o.kinds)
	}
	if !labelsMatch(sm.Spec.Selector.MatchLabels, o.Services[release].Labels) || labelsMatch(sm.Spec.Selector.MatchLabels, rs.Labels) ||
		labelsMatch(sm.Spec.Selector.MatchLabels, es.Labels) {
		t.Errorf("ServiceMonitor selector %v: want the gateway's Service only", sm.Spec.Selector.MatchLabels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Scheme != "http" {
		t.Errorf("ServiceMonitor endpoints %+v, want /metrics on port metrics, plain http", sm.Spec.Endpoints)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v: serviceMonitor.labels not applied", sm.Labels)
	}
}

// redis.enabled alone: the default config shares sessions and Responses
// ids through the chart's Redis.
func TestRedisWithDefaultConfig(t *testing.T) {
	o := mustRender(t, "--set", "redis.enabled=true")
	t.Setenv("REDIS_PASSWORD", "from-the-generated-secret") // what the pod's env gets from the Secret
	cfg := o.loadConfig(t)
	if rs := o.Services[release+"-redis"]; rs == nil || cfg.Access.Redis.Addr != rs.Name+":6379" || cfg.Access.Redis.PasswordEnv != "REDIS_PASSWORD" {
		t.Errorf("access.redis %+v; want the chart's Redis Service on 6379, with its password (rendered: %v)", cfg.Access.Redis, o.kinds)
	}
}

// ci/external-values.yaml: model files from a volume, an external Redis
// with its password from a Secret, simulated replicas.
func TestExternalValues(t *testing.T) {
	o := mustRender(t, "-f", filepath.Join(chartDir(), "ci", "external-values.yaml"))
	d, c := o.gateway(t)
	t.Setenv("REDIS_PASSWORD", "from-a-secret") // what the pod's env gets from the Secret
	cfg := o.loadConfig(t)
	if len(d.Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("init containers %v with models.source: volume", d.Spec.Template.Spec.InitContainers)
	}
	if vol := volume(d, "models"); vol.HostPath == nil || vol.HostPath.Path != "/srv/triage/models" {
		t.Errorf("models volume %+v, want the hostPath of the values", vol)
	}
	if _, ok := o.Deployments[release+"-redis"]; ok {
		t.Error("a Redis Deployment with redis.mode: external")
	}
	if cfg.Access.Redis.Addr != "redis.shared.svc.cluster.local:6379" || cfg.Access.Redis.PasswordEnv != "REDIS_PASSWORD" {
		t.Errorf("access.redis %+v, want the external address and password_env REDIS_PASSWORD", cfg.Access.Redis)
	}
	var secret *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == "REDIS_PASSWORD" && e.ValueFrom != nil {
			secret = e.ValueFrom.SecretKeyRef
		}
	}
	if secret == nil || secret.Name != "redis-auth" || secret.Key != "password" {
		t.Errorf("REDIS_PASSWORD from %+v, want secret redis-auth key password", secret)
	}
	if !slices.Contains(c.Args, "--sim") {
		t.Errorf("args %v without --sim", c.Args)
	}
	if pdb := o.PDBs[release]; pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB %+v: want maxUnavailable 1 alone", pdb.Spec)
	}
}

// Nonsense in the values stops helm with a message that says what and
// where: the schema's for shapes and ranges, the chart's own for what
// depends on two values.
func TestBadValuesRefused(t *testing.T) {
	dir := t.TempDir()
	noPools := filepath.Join(dir, "no-pools.yaml")
	if err := os.WriteFile(noPools, []byte("config:\n  triage:\n    pools: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"negative replicas", []string{"--set", "replicaCount=-1"}, []string{"at '/replicaCount': minimum: got -1, want 0"}},
		{"missing config", []string{"--set", "config.triage=null"}, []string{"at '/config': missing property 'triage'"}},
		{"config without pools", []string{"--set", "config.triage.pools=null"}, []string{"at '/config/triage': missing property 'pools'"}},
		{"empty pools", []string{"-f", noPools}, []string{"at '/config/triage/pools': minItems: got 0, want 1"}},
		{"bad port", []string{"--set", "containerPort=70000"}, []string{"at '/containerPort': maximum: got 70,000, want 65,535"}},
		{"bad service port", []string{"--set", "service.port=0"}, []string{"at '/service/port': minimum: got 0, want 1"}},
		{"typo", []string{"--set", "replicas=3"}, []string{"additional properties 'replicas' not allowed"}},
		{"no drain", []string{"--set", "shutdown.drainSeconds=0"}, []string{"at '/shutdown/drainSeconds': minimum: got 0, want 1"}},
		{"unknown models source", []string{"--set", "models.source=nfs"}, []string{"at '/models/source': value must be one of 'image', 'volume'"}},
		{"volume without volume", []string{"--set", "models.source=volume"}, []string{"at '/models/volume': minProperties: got 0, want 1"}},
		{"external redis without addr", []string{"--set", "redis.enabled=true,redis.mode=external"}, []string{"at '/redis/external/addr'"}},
		{"bad replica url", []string{"--set", "config.triage.pools[0].name=p,config.triage.pools[0].model=m,config.triage.pools[0].replicas[0].url=vllm:8000"},
			[]string{"at '/config/triage/pools/0/replicas/0/url'"}},
		// The chart's own checks.
		{"shutdown_timeout in the config", []string{"--set", "config.triage.server.shutdown_timeout=10s"},
			[]string{"config.triage.server.shutdown_timeout: set shutdown.drainSeconds instead"}},
		{"listen in the config", []string{"--set", "config.triage.listen=0.0.0.0:9000"}, []string{"config.triage.listen: set containerPort instead"}},
		{"relative heads", []string{"--set", "config.rules.heads=models/heads/subjects"},
			[]string{`config.rules.heads: "models/heads/subjects" is relative to the ConfigMap's directory`}},
		{"rules named, none given", []string{"--set", "config.rules=null"},
			[]string{`config.triage.rules: "rules.yaml" names a rules file, and config.rules is empty`}},
		{"state file on the read-only root", []string{"--set", "config.triage.access.state_file=/var/lib/triage/budgets.json"},
			[]string{"config.triage.access.state_file", "the pod's filesystem is read-only: set dataDir.enabled"}},
		{"usage log outside the writable directory", []string{"--set", "dataDir.enabled=true,config.triage.access.usage_log=usage.jsonl"},
			[]string{`config.triage.access.usage_log: "usage.jsonl" is a file the gateway writes; put it under dataDir.mountPath (/var/lib/triage/)`}},
		{"TLS for an external Redis", []string{"--set", "redis.enabled=true,redis.mode=external,redis.external.addr=redis:6379,redis.tls.enabled=true"},
			[]string{"redis.tls.enabled: it serves the chart's own Redis"}},
		{"Redis TLS set twice", []string{"--set", "redis.enabled=true,redis.tls.enabled=true,config.triage.access.redis.tls.enabled=true"},
			[]string{"config.triage.access.redis.tls: the chart sets it when redis.tls.enabled"}},
		{"HPA bounds", []string{"--set", "autoscaling.enabled=true,autoscaling.minReplicas=5,autoscaling.maxReplicas=3"},
			[]string{"autoscaling.minReplicas (5) is above autoscaling.maxReplicas (3)"}},
		{"HPA without a CPU request", []string{"--set", "autoscaling.enabled=true,resources.requests.cpu=null"},
			[]string{"resources.requests.cpu, which is not set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.args...)
			if err == nil {
				t.Fatalf("helm template %v rendered:\n%s", tc.args, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

const manifestHeader = `# The triage chart (deploy/helm/triage) rendered with its default values
# and release name "triage": kubectl apply -n NAMESPACE -f deploy/manifests/
# Generated; do not edit: change the chart and run
#   ` + regenerate + `
`

// deploy/manifests/triage.yaml is the chart's default rendering.
func TestManifests(t *testing.T) {
	out, err := render(t)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, out)
	want := manifestHeader + out
	if *update {
		if err := os.WriteFile(manifestPath(), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(manifestPath())
	if err != nil {
		t.Fatalf("%v: write it with %s", err, regenerate)
	}
	if string(got) != want {
		t.Fatalf("deploy/manifests/triage.yaml is not the chart's rendering with default values: run %s\n%s", regenerate, firstDiff(string(got), want))
	}
}

// firstDiff shows the first line where got and want part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  checked in: %q\n  rendered:   %q", i+1, gl, wl)
		}
	}
	return ""
}
