package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
	"github.com/triagegw/triage/rules"
)

// encoderValues turn on the encoder service with everything it has.
var encoderValues = []string{"--set", "encoder.enabled=true,encoder.autoscaling.enabled=true,encoder.serviceMonitor.enabled=true,encoder.apiKeySecret.name=enc-key,encoder.tls.secretName=enc-tls"}

// encoderTLSDir is where the encoder's TLS Secret is mounted, in its pods
// and (the CA alone) in the gateway's.
const encoderTLSDir = "/etc/triage/encoder-tls"

func (o *objects) encoder(t *testing.T) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := o.Deployments[release+"-encoder"]
	if d == nil {
		t.Fatalf("no Deployment %s-encoder among %v", release, o.kinds)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the encoder's pod has %d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	return d, &d.Spec.Template.Spec.Containers[0]
}

// TestEncoderOff: by default the chart renders no encoder and the rules
// keep tier 2 in the gateway.
func TestEncoderOff(t *testing.T) {
	o := mustRender(t)
	for _, k := range o.kinds {
		if strings.Contains(k, "encoder") {
			t.Errorf("the default rendering has %s", k)
		}
	}
	_, data := o.configFiles(t)
	if strings.Contains(data["rules.yaml"], "encoder") {
		t.Errorf("the default rules name an encoder:\n%s", data["rules.yaml"])
	}
}

// TestEncoderService: with encoder.enabled the chart renders the encoder's
// Deployment, Service, HPA on queue depth and ServiceMonitor, and points
// the gateways' rules at the Service, which the gateway accepts.
func TestEncoderService(t *testing.T) {
	o := mustRender(t, encoderValues...)
	d, c := o.encoder(t)
	name := release + "-encoder"

	// The process: encode serve on the rules' heads, on the Service's port.
	cfg := o.loadConfig(t)
	f, err := rules.ParseFile(cfg.RulesPath())
	if err != nil {
		t.Fatalf("the chart's rules.yaml: %v", err)
	}
	want := []string{"encode", "serve", "--heads", f.Heads, "--models", "/models", "--listen", "0.0.0.0:9100", "--runs", "1", "--batch", "8", "--queue", "1024", "--drain", "10s", "--api-key-env", "ENCODER_API_KEY",
		"--tls-cert", encoderTLSDir + "/tls.crt", "--tls-key", encoderTLSDir + "/tls.key"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("encoder args = %q, want %q", c.Args, want)
	}
	if env(c, "TRIAGE_MODELS") != "/models" || mountPath(c.VolumeMounts, "models") != "/models" {
		t.Errorf("encoder: TRIAGE_MODELS %q, models mounted at %q, want /models", env(c, "TRIAGE_MODELS"), mountPath(c.VolumeMounts, "models"))
	}
	key := func(c *corev1.Container) *corev1.SecretKeySelector {
		for _, e := range c.Env {
			if e.Name == "ENCODER_API_KEY" && e.ValueFrom != nil {
				return e.ValueFrom.SecretKeyRef
			}
		}
		return nil
	}
	if k := key(c); k == nil || k.Name != "enc-key" || k.Key != "api-key" {
		t.Errorf("encoder: ENCODER_API_KEY from %+v, want Secret enc-key key api-key", k)
	}
	_, gw := o.gateway(t)
	if k := key(gw); k == nil || k.Name != "enc-key" {
		t.Errorf("gateway: ENCODER_API_KEY from %+v, want Secret enc-key", k)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" {
		t.Errorf("encoder readiness probe %+v, want GET /ready", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
		t.Errorf("encoder liveness probe %+v, want GET /health", p)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("encoder security context %+v, want a read-only root and no privilege escalation", sc)
	}
	if d.Spec.Template.Spec.AutomountServiceAccountToken == nil || *d.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the encoder's pods mount a service account token")
	}
	checkWritable(t, d)
	// Its resources: one core a Run, memory from the measured RSS.
	if got := c.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("encoder cpu request %s, want 1 (one core for its one Run)", got.String())
	}
	if got := c.Resources.Requests[corev1.ResourceMemory]; got.Cmp(resource.MustParse("128Mi")) != 0 {
		t.Errorf("encoder memory request %s, want 128Mi", got.String())
	}
	if d.Spec.Replicas != nil {
		t.Errorf("the encoder Deployment sets replicas %d while its HPA owns the count", *d.Spec.Replicas)
	}

	// The Service reaches the encoder's pods and only them; the gateway's
	// Service does not reach the encoder's.
	svc := o.Services[name]
	if svc == nil {
		t.Fatalf("no Service %s among %v", name, o.kinds)
	}
	pods := d.Spec.Template.Labels
	gwd, _ := o.gateway(t)
	if !labelsMatch(svc.Spec.Selector, pods) || labelsMatch(svc.Spec.Selector, gwd.Spec.Template.Labels) {
		t.Errorf("Service %s selects %v: want the encoder's pods %v and not the gateway's %v", name, svc.Spec.Selector, pods, gwd.Spec.Template.Labels)
	}
	if labelsMatch(o.Services[release].Spec.Selector, pods) {
		t.Errorf("the gateway's Service selects the encoder's pods")
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9100 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service %s ports %+v, want 9100 to http", name, svc.Spec.Ports)
	}

	// Autoscaling on the pods' average queue depth.
	hpa := o.HPAs[name]
	if hpa == nil {
		t.Fatalf("no HPA %s among %v", name, o.kinds)
	}
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != name || len(hpa.Spec.Metrics) != 1 {
		t.Fatalf("HPA %s scales %+v on %d metrics, want Deployment %s on one", name, hpa.Spec.ScaleTargetRef, len(hpa.Spec.Metrics), name)
	}
	m := hpa.Spec.Metrics[0]
	if m.Pods == nil || m.Pods.Metric.Name != "triage_encoder_queue_texts" || m.Pods.Target.AverageValue == nil || m.Pods.Target.AverageValue.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("HPA metric %+v, want the pods' triage_encoder_queue_texts, average 4", m)
	}
	if sm := o.ServiceMonitors[name]; sm == nil || !labelsMatch(sm.Spec.Selector.MatchLabels, svc.Labels) || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor %s = %+v, want /metrics of the encoder's Service", name, sm)
	}

	// The gateways' rules take tier 2 from the Service, over https.
	e := f.Tier2.Encoder
	if e == nil || e.URL != "https://"+name+":9100" || e.Model != "use-lite-int8" || e.APIKeyEnv != "ENCODER_API_KEY" || e.CAFile != encoderTLSDir+"/ca.crt" {
		t.Fatalf("the rules' tier2.encoder = %+v, want the Service https://%s:9100, model use-lite-int8, the key from ENCODER_API_KEY, the CA of the Secret", e, name)
	}
	// And the gateway accepts them: the heads were trained on the encoder
	// the Service serves (serve --check, which loads the remote encoder's
	// manifest and its CA, and calls nothing).
	_, data := o.configFiles(t)
	data["rules.yaml"] = strings.ReplaceAll(data["rules.yaml"], e.CAFile, tlsconftest.New(t).CAFile)
	v, models := gatewayFiles(t, data)
	bin, err := triageBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(v.dir, "triage.yaml"), "--check")
	cmd.Env = append(os.Environ(), "TRIAGE_MODELS="+models, "ENCODER_API_KEY=k")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok (3 pools; rules ") {
		t.Fatalf("triage serve --check on the chart's config with the encoder service: %v\n%s", err, out)
	}

	// Another model name is refused by the gateway, naming both.
	o = mustRender(t, append(encoderValues, "--set", "encoder.model=bge-small-en-v1.5")...)
	_, data = o.configFiles(t)
	data["rules.yaml"] = strings.ReplaceAll(data["rules.yaml"], e.CAFile, tlsconftest.New(t).CAFile)
	v, _ = gatewayFiles(t, data)
	cmd = exec.Command(bin, "serve", "--config", filepath.Join(v.dir, "triage.yaml"), "--check")
	cmd.Env = append(os.Environ(), "TRIAGE_MODELS="+models, "ENCODER_API_KEY=k")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bge-small-en-v1.5") || !strings.Contains(string(out), "use-lite-int8") {
		t.Errorf("serve --check with encoder.model another model's: %v, want a refusal naming both\n%s", err, out)
	}
}

// TestEncoderArgsParse: the encoder's rendered arguments are the
// command's flags: the binary gets past them (in this build without the
// runtime, to the error saying tier 2 is not in it).
func TestEncoderArgsParse(t *testing.T) {
	o := mustRender(t, encoderValues...)
	_, c := o.encoder(t)
	bin, err := triageBinary()
	if err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	args[slices.Index(args, "--listen")+1] = "127.0.0.1:0"
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "ENCODER_API_KEY=k")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 2 || !strings.Contains(string(out), "rebuild with -tags ort") {
		t.Errorf("triage %s: %v, want it past the flags to the runtime's absence\n%s", strings.Join(args, " "), err, out)
	}
}

func TestEncoderBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"encoder named twice", []string{"--set", "encoder.enabled=true,config.rules.tier2.encoder.url=http://vllm:8000"}, "config.rules.tier2.encoder: the chart points it at its encoder Service"},
		{"relative heads", []string{"--set", "encoder.enabled=true,encoder.heads=models/heads/subjects"}, `encoder.heads: "models/heads/subjects" must be an absolute path`},
		{"no rules", []string{"--set", "encoder.enabled=true,config.rules=null,config.triage.rules=null"}, "encoder.enabled: the encoder serves the tier-2 encoder of the heads the rules name"},
		{"HPA bounds", []string{"--set", "encoder.enabled=true,encoder.autoscaling.enabled=true,encoder.autoscaling.minReplicas=4,encoder.autoscaling.maxReplicas=2"}, "encoder.autoscaling.minReplicas (4) is above encoder.autoscaling.maxReplicas (2)"},
		{"no runs", []string{"--set", "encoder.runs=0"}, "at '/encoder/runs': minimum: got 0, want 1"},
		{"zero target", []string{"--set", "encoder.autoscaling.targetQueueTexts=0"}, "at '/encoder/autoscaling/targetQueueTexts'"},
		{"typo", []string{"--set", "encoder.replica=3"}, "additional properties 'replica' not allowed"},
		{"a key in clear", []string{"--set", "encoder.enabled=true,encoder.apiKeySecret.name=enc-key"}, "encoder.apiKeySecret: the API key would cross the pod network in clear: give encoder.tls.secretName"},
		{"a selector typo", []string{"--set", "encoder.networkPolicy.metrics.namespace=x"}, "additional properties 'namespace' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.args...)
			if err == nil {
				t.Fatalf("helm template %v rendered:\n%s", tc.args, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the error does not say %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestEncoderTLS: with encoder.tls.secretName the encoder serves https
// from the Secret's tls.crt and tls.key (mounted as a directory, so that
// a renewed Secret is seen), its probes and its ServiceMonitor speak
// https, and the gateways get only the Secret's ca.crt, which their rules
// trust; without it and with a key, plain HTTP only when said.
func TestEncoderTLS(t *testing.T) {
	o := mustRender(t, encoderValues...)
	d, c := o.encoder(t)
	name := release + "-encoder"
	if v := volume(d, "tls"); v.Secret == nil || v.Secret.SecretName != "enc-tls" || len(v.Secret.Items) != 2 || mountPath(c.VolumeMounts, "tls") != encoderTLSDir {
		t.Errorf("the encoder's tls volume %+v mounted at %q: want tls.crt and tls.key of enc-tls at %s", v, mountPath(c.VolumeMounts, "tls"), encoderTLSDir)
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("the encoder mounts %s with subPath %s: a Secret renewed in place would not reach it", m.Name, m.SubPath)
		}
	}
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("the encoder's %s probe %+v: want HTTPS", what, p)
		}
	}
	sm := o.ServiceMonitors[name]
	if sm == nil {
		t.Fatalf("no ServiceMonitor %s among %v", name, o.kinds)
	}
	ep := sm.Spec.Endpoints[0]
	if tc := ep.TLSConfig; ep.Scheme != "https" || tc == nil || tc.ServerName != name || tc.CA == nil || tc.CA.Secret == nil || tc.CA.Secret.Name != "enc-tls" || tc.CA.Secret.Key != "ca.crt" {
		t.Errorf("ServiceMonitor %s endpoint %+v: want https, the Service's name verified with ca.crt of enc-tls", name, ep)
	}
	gd, gw := o.gateway(t)
	if v := volume(gd, "encoder-tls"); v.Secret == nil || v.Secret.SecretName != "enc-tls" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "ca.crt" {
		t.Errorf("the gateway's encoder-tls volume %+v: want only ca.crt of enc-tls", v)
	}
	if got := mountPath(gw.VolumeMounts, "encoder-tls"); got != encoderTLSDir {
		t.Errorf("the gateway mounts the encoder's CA at %q, want %s (the rules' ca_file)", got, encoderTLSDir)
	}

	// Plain HTTP with a key, said to be protected otherwise.
	o = mustRender(t, "--set", "encoder.enabled=true,encoder.apiKeySecret.name=enc-key,encoder.insecurePlainHTTP=true")
	d, c = o.encoder(t)
	if !slices.Contains(c.Args, "--insecure-plain-http") || slices.Contains(c.Args, "--tls-cert") || volume(d, "tls").Name != "" {
		t.Errorf("encoder.insecurePlainHTTP: args %q, tls volume %+v: want --insecure-plain-http and no TLS", c.Args, volume(d, "tls"))
	}
	if p := c.ReadinessProbe; p.HTTPGet.Scheme != corev1.URISchemeHTTP {
		t.Errorf("plain HTTP: readiness probe scheme %s", p.HTTPGet.Scheme)
	}
	gd, _ = o.gateway(t)
	if volume(gd, "encoder-tls").Name != "" {
		t.Error("plain HTTP: the gateway mounts an encoder CA")
	}
	cfg := o.loadConfig(t)
	f, err := rules.ParseFile(cfg.RulesPath())
	if err != nil {
		t.Fatal(err)
	}
	if e := f.Tier2.Encoder; e == nil || e.URL != "http://"+release+"-encoder:9100" || e.CAFile != "" {
		t.Errorf("plain HTTP: the rules' tier2.encoder = %+v", e)
	}
}

// TestEncoderNetworkPolicy: by default with the encoder, a NetworkPolicy
// admits to the encoder's port the gateway's pods and nothing else; the
// scraper's namespace and pods when given; none when turned off.
func TestEncoderNetworkPolicy(t *testing.T) {
	o := mustRender(t, encoderValues...)
	name := release + "-encoder"
	d, c := o.encoder(t)
	gd, _ := o.gateway(t)
	np := o.NetworkPolicies[name]
	if np == nil {
		t.Fatalf("no NetworkPolicy %s among %v", name, o.kinds)
	}
	encPods, gwPods := d.Spec.Template.Labels, gd.Spec.Template.Labels
	if !labelsMatch(np.Spec.PodSelector.MatchLabels, encPods) || labelsMatch(np.Spec.PodSelector.MatchLabels, gwPods) {
		t.Errorf("NetworkPolicy %s applies to %v: want the encoder's pods %v and not the gateway's", name, np.Spec.PodSelector.MatchLabels, encPods)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v, want Ingress", np.Spec.PolicyTypes)
	}
	port := func(r networkingv1.NetworkPolicyIngressRule) bool {
		return len(r.Ports) == 1 && r.Ports[0].Port != nil && r.Ports[0].Port.String() == c.Ports[0].Name && c.Ports[0].ContainerPort == 9100
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("%d ingress rules, want 1 (the gateways): %+v", len(np.Spec.Ingress), np.Spec.Ingress)
	}
	r := np.Spec.Ingress[0]
	if len(r.From) != 1 || r.From[0].PodSelector == nil || r.From[0].NamespaceSelector != nil || r.From[0].IPBlock != nil ||
		!labelsMatch(r.From[0].PodSelector.MatchLabels, gwPods) || labelsMatch(r.From[0].PodSelector.MatchLabels, encPods) || !port(r) {
		t.Errorf("ingress %+v: want the gateway's pods of this namespace %v, to the encoder's port only", r, gwPods)
	}

	// The scraper's namespace, and pods in it.
	o = mustRender(t, append(encoderValues, "--set", "encoder.networkPolicy.metrics.namespaceSelector.team=monitoring,encoder.networkPolicy.metrics.podSelector.app=prometheus")...)
	np = o.NetworkPolicies[name]
	if np == nil || len(np.Spec.Ingress) != 2 {
		t.Fatalf("with a scraper: %+v, want two ingress rules", np)
	}
	r = np.Spec.Ingress[1]
	if len(r.From) != 1 || r.From[0].NamespaceSelector == nil || r.From[0].NamespaceSelector.MatchLabels["team"] != "monitoring" ||
		r.From[0].PodSelector == nil || r.From[0].PodSelector.MatchLabels["app"] != "prometheus" || !port(r) {
		t.Errorf("the scraper's ingress %+v: want pods app=prometheus of namespaces team=monitoring, to the encoder's port", r)
	}

	o = mustRender(t, append(encoderValues, "--set", "encoder.networkPolicy.enabled=false")...)
	if len(o.NetworkPolicies) != 0 {
		t.Errorf("encoder.networkPolicy.enabled=false renders %v", o.kinds)
	}
}
