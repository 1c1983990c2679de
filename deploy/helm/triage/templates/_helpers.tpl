{{/* Names and labels. */}}
{{- define "triage.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "triage.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "triage.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The gateway's pods; the internal Redis's have component: redis. */}}
{{- define "triage.selectorLabels" -}}
app.kubernetes.io/name: {{ include "triage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "triage.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "triage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "triage.commonLabels" -}}
helm.sh/chart: {{ include "triage.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "triage.labels" -}}
{{ include "triage.commonLabels" . }}
{{ include "triage.selectorLabels" . }}
{{- end -}}

{{- define "triage.redisLabels" -}}
{{ include "triage.commonLabels" . }}
{{ include "triage.redisSelectorLabels" . }}
{{- end -}}

{{- define "triage.redisName" -}}
{{- printf "%s-redis" (include "triage.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Redis address the gateway's access.redis.addr gets. */}}
{{- define "triage.redisAddr" -}}
{{- if eq .Values.redis.mode "external" -}}
{{- .Values.redis.external.addr -}}
{{- else -}}
{{- printf "%s:6379" (include "triage.redisName" .) -}}
{{- end -}}
{{- end -}}

{{/*
triage.redisSecret: the Secret name and key holding the Redis password the
gateway sends ("" when none): the internal Redis's (auth.existingSecret, or
the Secret the chart generates), or external.passwordSecret.
*/}}
{{- define "triage.redisSecretName" -}}
{{- if eq .Values.redis.mode "external" -}}
{{- .Values.redis.external.passwordSecret.name -}}
{{- else if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecret -}}
{{- else -}}
{{- printf "%s-auth" (include "triage.redisName" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "triage.redisSecretKey" -}}
{{- if eq .Values.redis.mode "external" -}}
{{- .Values.redis.external.passwordSecret.key -}}
{{- else -}}
{{- .Values.redis.auth.key -}}
{{- end -}}
{{- end -}}

{{/* TLS between the gateway and the chart's own Redis. */}}
{{- define "triage.redisTLS" -}}
{{- if and .Values.redis.enabled (eq .Values.redis.mode "internal") .Values.redis.tls.enabled -}}true{{- end -}}
{{- end -}}

{{- define "triage.redisTLSSecret" -}}
{{- .Values.redis.tls.existingSecret | default (printf "%s-tls" (include "triage.redisName" .) | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{- define "triage.redisTLSDir" -}}/etc/triage/redis-tls{{- end -}}

{{- define "triage.configDir" -}}/etc/triage/config{{- end -}}

{{/*
triage.triageConfig: triage.yaml as the gateway reads it: config.triage
with the keys the chart owns set (listen, server.shutdown_timeout,
access.redis.addr and password_env), after the checks that values.schema.json
cannot express.
*/}}
{{- define "triage.triageConfig" -}}
{{- $c := deepCopy .Values.config.triage -}}
{{- $server := get $c "server" | default dict -}}
{{- if hasKey $server "shutdown_timeout" -}}
{{- fail "config.triage.server.shutdown_timeout: set shutdown.drainSeconds instead; the chart writes server.shutdown_timeout from it and sizes terminationGracePeriodSeconds to match" -}}
{{- end -}}
{{- if hasKey $c "listen" -}}
{{- fail "config.triage.listen: set containerPort instead; the chart listens on 0.0.0.0:<containerPort>, where the probes and the Service look" -}}
{{- end -}}
{{- $_ := set $c "listen" (printf "0.0.0.0:%d" (int .Values.containerPort)) -}}
{{- $_ := set $server "shutdown_timeout" (printf "%ds" (int .Values.shutdown.drainSeconds)) -}}
{{- $_ := set $c "server" $server -}}
{{- $access := get $c "access" | default dict -}}
{{- if .Values.redis.enabled -}}
{{- $redis := get $access "redis" | default dict -}}
{{- if get $redis "addr" -}}
{{- fail "config.triage.access.redis.addr: the chart sets it when redis.enabled (redis.mode internal, or redis.external.addr); leave it out" -}}
{{- end -}}
{{- $_ := set $redis "addr" (include "triage.redisAddr" .) -}}
{{- if include "triage.redisSecretName" . -}}
{{- $_ := set $redis "password_env" "REDIS_PASSWORD" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "external") .Values.redis.tls.enabled -}}
{{- fail "redis.tls.enabled: it serves the chart's own Redis (redis.mode internal) over TLS; for an external Redis set config.triage.access.redis.tls, with its CA mounted through extraVolumes" -}}
{{- end -}}
{{- if include "triage.redisTLS" . -}}
{{- if hasKey $redis "tls" -}}
{{- fail "config.triage.access.redis.tls: the chart sets it when redis.tls.enabled; leave it out" -}}
{{- end -}}
{{- $_ := set $redis "tls" (dict "enabled" true "ca_file" (printf "%s/ca.crt" (include "triage.redisTLSDir" .))) -}}
{{- end -}}
{{- $_ := set $access "redis" $redis -}}
{{- $_ := set $c "access" $access -}}
{{- end -}}
{{- /* Files the gateway writes must be in the writable directory. */ -}}
{{- $written := dict -}}
{{- with get $access "state_file" }}{{ $_ := set $written "config.triage.access.state_file" . }}{{ end -}}
{{- with get $access "usage_log" }}{{ $_ := set $written "config.triage.access.usage_log" . }}{{ end -}}
{{- with .Values.config.rules -}}
{{- with get (get . "shadow" | default dict) "log" }}{{ $_ := set $written "config.rules.shadow.log" . }}{{ end -}}
{{- end -}}
{{- range $key, $path := $written -}}
{{- if not $.Values.dataDir.enabled -}}
{{- fail (printf "%s: %q is a file the gateway writes, and the pod's filesystem is read-only: set dataDir.enabled and put it under dataDir.mountPath (%s)" $key $path $.Values.dataDir.mountPath) -}}
{{- end -}}
{{- if not (hasPrefix (printf "%s/" (trimSuffix "/" $.Values.dataDir.mountPath)) $path) -}}
{{- fail (printf "%s: %q is a file the gateway writes; put it under dataDir.mountPath (%s/), the only writable directory in the pod" $key $path (trimSuffix "/" $.Values.dataDir.mountPath)) -}}
{{- end -}}
{{- end -}}
{{- /* The rules file and the ConfigMap agree. */ -}}
{{- if .Values.config.rules -}}
{{- if ne (get $c "rules" | toString) "rules.yaml" -}}
{{- fail (printf "config.triage.rules: %q, but the chart puts config.rules in the ConfigMap as rules.yaml beside triage.yaml: write rules: rules.yaml" (get $c "rules" | toString)) -}}
{{- end -}}
{{- $heads := get .Values.config.rules "heads" | toString -}}
{{- if not (hasPrefix "/" $heads) -}}
{{- fail (printf "config.rules.heads: %q is relative to the ConfigMap's directory, which holds only triage.yaml and rules.yaml: give an absolute path, such as the image's /etc/triage/models/heads/subjects" $heads) -}}
{{- end -}}
{{- else if get $c "rules" -}}
{{- fail (printf "config.triage.rules: %q names a rules file, and config.rules is empty: give its content in config.rules" (get $c "rules" | toString)) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{- define "triage.probeScheme" -}}
{{- $tls := get (get .Values.config.triage "server" | default dict) "tls" | default dict -}}
{{- if get $tls "cert_file" -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* The encoder service (encoder.enabled): its name, its pods' labels. */}}
{{- define "triage.encoderName" -}}
{{- printf "%s-encoder" (include "triage.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "triage.encoderSelectorLabels" -}}
app.kubernetes.io/name: {{ include "triage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: encoder
{{- end -}}

{{- define "triage.encoderLabels" -}}
{{ include "triage.commonLabels" . }}
{{ include "triage.encoderSelectorLabels" . }}
{{- end -}}

{{/* The encoder's TLS Secret, mounted in its pods (tls.crt, tls.key) and,
the CA alone, in the gateway's (ca.crt). */}}
{{- define "triage.encoderTLSDir" -}}/etc/triage/encoder-tls{{- end -}}

{{/* The heads whose tier-2 encoder the encoder service serves. */}}
{{- define "triage.encoderHeads" -}}
{{- if .Values.encoder.heads -}}
{{- .Values.encoder.heads -}}
{{- else if .Values.config.rules -}}
{{- get .Values.config.rules "heads" | toString -}}
{{- else -}}
{{- fail "encoder.enabled: the encoder serves the tier-2 encoder of the heads the rules name, and config.rules is empty: give config.rules, or encoder.heads" -}}
{{- end -}}
{{- end -}}

{{/*
triage.rulesConfig: rules.yaml as the gateway reads it: config.rules, with
tier2.encoder pointed at the chart's encoder Service when encoder.enabled.
*/}}
{{- define "triage.rulesConfig" -}}
{{- $r := deepCopy .Values.config.rules -}}
{{- if .Values.encoder.enabled -}}
{{- $t2 := get $r "tier2" | default dict -}}
{{- if hasKey $t2 "encoder" -}}
{{- fail "config.rules.tier2.encoder: the chart points it at its encoder Service when encoder.enabled; leave it out (or set encoder.enabled: false to name another engine)" -}}
{{- end -}}
{{- $scheme := ternary "https" "http" (not (empty .Values.encoder.tls.secretName)) -}}
{{- $e := dict "url" (printf "%s://%s:%d" $scheme (include "triage.encoderName" .) (int .Values.encoder.port)) "model" .Values.encoder.model -}}
{{- if .Values.encoder.tls.secretName -}}
{{- $_ := set $e "ca_file" (printf "%s/ca.crt" (include "triage.encoderTLSDir" .)) -}}
{{- end -}}
{{- if .Values.encoder.apiKeySecret.name -}}
{{- $_ := set $e "api_key_env" "ENCODER_API_KEY" -}}
{{- end -}}
{{- $_ := set $t2 "encoder" $e -}}
{{- $_ := set $r "tier2" $t2 -}}
{{- end -}}
{{- toYaml $r -}}
{{- end -}}
