{{/* The chart's short name. */}}
{{- define "whyjob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: every object is this plus its component (63 characters at most). */}}
{{- define "whyjob.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "RELEASE-whyjob-COMPONENT": call with (list $ "collector"). */}}
{{- define "whyjob.component" -}}
{{- printf "%s-%s" (include "whyjob.fullname" (index . 0)) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "whyjob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "whyjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: call with (list $ "collector"). */}}
{{- define "whyjob.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "whyjob.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "whyjob.componentLabels" -}}
{{ include "whyjob.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "whyjob.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "whyjob.serviceAccountName" -}}
{{- $ := index . 0 -}}
{{- $sa := index $.Values.serviceAccount (index . 1) }}
{{- if $sa.create }}
{{- default (include "whyjob.component" .) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{/* SQLite on the chart's volume, or Elasticsearch. */}}
{{- define "whyjob.sqlite" -}}
{{- if eq .Values.index.backend "sqlite" }}true{{ end }}
{{- end }}

{{/* SQLite on an emptyDir: serve runs as a second container of the collector's pod, the one
place that sees the same files. */}}
{{- define "whyjob.serveAlongside" -}}
{{- if and .Values.serve.enabled (include "whyjob.sqlite" .) (not .Values.index.sqlite.persistence.enabled) }}true{{ end }}
{{- end }}

{{- define "whyjob.indexPath" -}}/var/lib/whyjob/index.sqlite{{- end }}

{{- define "whyjob.receiverURL" -}}
{{- printf "http://%s.%s.svc:%v" (include "whyjob.component" (list . "collector")) .Release.Namespace .Values.collector.receiver.port }}
{{- end }}

{{/* The Secret holding the receiver's bearer token, when there is one. */}}
{{/* The Secret holding the receiver's bearer token: yours, or the chart's (your value, or one
it generates: whyjob refuses a receiver reachable from other machines without a token). */}}
{{- define "whyjob.receiverSecret" -}}
{{- if .Values.receiverToken.existingSecret }}{{ .Values.receiverToken.existingSecret }}
{{- else if or .Values.receiverToken.value (and .Values.collector.enabled .Values.collector.receiver.enabled) }}{{ include "whyjob.component" (list . "receiver-token") }}
{{- end }}
{{- end }}

{{- define "whyjob.tokensSecret" -}}
{{- if .Values.serve.tokens.existingSecret }}{{ .Values.serve.tokens.existingSecret }}
{{- else if or .Values.serve.tokens.tokens (include "whyjob.generatedTokens" .) }}{{ include "whyjob.component" (list . "tokens") }}
{{- end }}
{{- end }}

{{/* No tokens and no trusted proxy: the chart keeps one read-all token in a Secret of its
own (not in a pod log, where serve would otherwise print the one it makes up). */}}
{{- define "whyjob.generatedTokens" -}}
{{- if and .Values.serve.enabled (not .Values.serve.tokens.tokens) (not .Values.serve.tokens.existingSecret) (not (get (.Values.serve.api | default dict) "proxy_cidrs")) }}true{{ end }}
{{- end }}

{{/* The receiver's token for this render, made once: the Secret and the pods' checksum
annotations read the same value (a value given, the one an earlier install kept, or new). */}}
{{- define "whyjob.receiverToken" -}}
{{- if not (hasKey .Values.receiverToken "rendered") }}
{{- $kept := (lookup "v1" "Secret" .Release.Namespace (include "whyjob.component" (list . "receiver-token"))).data | default dict }}
{{- $_ := set .Values.receiverToken "rendered" (.Values.receiverToken.value | b64enc | default $kept.token | default (randAlphaNum 40 | b64enc)) }}
{{- end }}
{{- .Values.receiverToken.rendered }}
{{- end }}

{{/* Pods restart when the receiver's token changes (a GitOps render makes a new one unless
receiverToken.value or existingSecret is set): the collector and the agents move together. */}}
{{- define "whyjob.receiverChecksum" -}}
{{- if eq (include "whyjob.receiverSecret" .) (include "whyjob.component" (list . "receiver-token")) }}
checksum/receiver-token: {{ include "whyjob.receiverToken" . | sha256sum }}
{{- end }}
{{- end }}

{{- define "whyjob.slackSecret" -}}
{{- if not .Values.slack.enabled }}
{{- else if .Values.slack.existingSecret }}{{ .Values.slack.existingSecret }}
{{- else if or .Values.slack.token .Values.slack.signingSecret }}{{ include "whyjob.component" (list . "slack") }}
{{- end }}
{{- end }}

{{- define "whyjob.esSecret" -}}
{{- $es := .Values.index.elasticsearch }}
{{- if $es.existingSecret }}{{ $es.existingSecret }}
{{- else if or $es.apiKey $es.password }}{{ include "whyjob.component" (list . "elasticsearch") }}
{{- end }}
{{- end }}

{{/* The config file every component reads (docs/configuration.md): one file, each command
reads its own sections. */}}
{{- define "whyjob.config" -}}
{{- $v := .Values }}
{{- $cfg := deepCopy $v.config }}
{{- if include "whyjob.sqlite" . }}
{{- $_ := set $cfg "index" (include "whyjob.indexPath" .) }}
{{- else }}
{{- $es := $v.index.elasticsearch }}
{{- $index := dict "backend" "elasticsearch" "urls" $es.urls "prefix" $es.prefix }}
{{- if $es.username }}{{ $_ := set $index "username" $es.username }}{{ end }}
{{- if $es.caSecret }}{{ $_ := set $index "ca_certs" "/etc/whyjob/es/ca.crt" }}{{ end }}
{{- $_ := set $cfg "index" $index }}
{{- end }}
{{- if $v.cluster }}{{ $_ := set $cfg "cluster" $v.cluster }}{{ end }}
{{- $_ := set $cfg "metrics" (dict "listen" (printf "0.0.0.0:%v" $v.metrics.port)) }}
{{- $_ := set $cfg "collectors" $v.collector.collectors }}
{{- if $v.collector.receiver.enabled }}
{{- $_ := set $cfg "receiver" (dict "listen" (printf "0.0.0.0:%v" $v.collector.receiver.port) "keep" $v.collector.receiver.keep) }}
{{- end }}
{{- if $v.collector.markNodes.enabled }}
{{- $m := $v.collector.markNodes }}
{{- $_ := set $cfg "mark_nodes" (dict "label" $m.label "taint" $m.taint "window" $m.window "interval" $m.interval "in_cluster" true) }}
{{- end }}
{{- if $v.agent.enabled }}
{{- $a := $v.agent }}
{{- $agent := dict "send_to" (include "whyjob.receiverURL" .) "spool" "/var/lib/whyjob-agent" "cloud" $a.cloud "kernel" $a.kernel "pod_logs" (ternary "/var/log/pods" "off" $a.podLogs) "keep" $a.keep }}
{{- if eq $a.kernel "journal" }}{{ $_ := set $agent "journal_dir" "/host/var/log/journal" }}{{ end }}
{{- $_ := set $cfg "agent" $agent }}
{{- end }}
{{- if $v.serve.enabled }}
{{- $api := deepCopy $v.serve.api }}
{{- $_ := set $api "listen" (printf "0.0.0.0:%v" $v.serve.port) }}
{{- if $v.serve.publicUrl }}{{ $_ := set $api "public_url" $v.serve.publicUrl }}{{ end }}
{{- if include "whyjob.tokensSecret" . }}{{ $_ := set $api "tokens" "/etc/whyjob/tokens/tokens.yaml" }}{{ end }}
{{- if gt (int $v.serve.replicas) 1 }}
{{- $_ := set $api "lease" (printf "%s/%s" .Release.Namespace (include "whyjob.component" (list . "serve"))) }}
{{- $_ := set $api "in_cluster" true }}
{{- end }}
{{- $_ := set $cfg "api" $api }}
{{- if $v.serve.alerts }}{{ $_ := set $cfg "alerts" $v.serve.alerts }}{{ end }}
{{- if $v.slack.enabled }}{{ $_ := set $cfg "slack" $v.slack.config }}{{ end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* Where a component's ready and live answers are. */}}
{{- define "whyjob.probes" -}}
livenessProbe:
  httpGet: {path: /livez, port: {{ .port }}}
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  periodSeconds: 10
  timeoutSeconds: 8
  failureThreshold: 3
{{- end }}

{{/* Credentials every process that opens the index needs: from Secrets, never in the config file. */}}
{{- define "whyjob.indexEnv" -}}
{{- $es := include "whyjob.esSecret" . }}
{{- if and (not (include "whyjob.sqlite" .)) $es }}
{{- if or .Values.index.elasticsearch.apiKey .Values.index.elasticsearch.existingSecret }}
- name: WHYJOB_ES_API_KEY
  valueFrom: {secretKeyRef: {name: {{ $es }}, key: api-key, optional: {{ not .Values.index.elasticsearch.apiKey }}}}
{{- end }}
{{- if or .Values.index.elasticsearch.password .Values.index.elasticsearch.existingSecret }}
- name: WHYJOB_ES_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ $es }}, key: password, optional: {{ not .Values.index.elasticsearch.password }}}}
{{- end }}
{{- end }}
{{- end }}

{{- define "whyjob.receiverEnv" -}}
{{- with include "whyjob.receiverSecret" . }}
- name: WHYJOB_RECEIVER_TOKEN
  valueFrom: {secretKeyRef: {name: {{ . }}, key: token}}
{{- end }}
{{- end }}

{{/* The index volume and the config of the collector's and serve's pods. */}}
{{- define "whyjob.indexVolumes" -}}
- name: config
  configMap: {name: {{ include "whyjob.component" (list . "config") }}}
- name: tmp
  emptyDir: {}
{{- if include "whyjob.sqlite" . }}
- name: index
{{- if .Values.index.sqlite.persistence.enabled }}
  persistentVolumeClaim: {claimName: {{ default (include "whyjob.component" (list . "index")) .Values.index.sqlite.persistence.existingClaim }}}
{{- else }}
  emptyDir: {}
{{- end }}
{{- else if .Values.index.elasticsearch.caSecret }}
- name: es-ca
  secret: {secretName: {{ .Values.index.elasticsearch.caSecret }}}
{{- end }}
{{- end }}

{{- define "whyjob.indexMounts" -}}
- {name: config, mountPath: /etc/whyjob/config.yaml, subPath: config.yaml, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- if include "whyjob.sqlite" . }}
- {name: index, mountPath: /var/lib/whyjob}
{{- else if .Values.index.elasticsearch.caSecret }}
- {name: es-ca, mountPath: /etc/whyjob/es, readOnly: true}
{{- end }}
{{- end }}

{{/* The serve container: in its own Deployment, or in the collector's pod (SQLite on an emptyDir). */}}
{{- define "whyjob.serveContainer" -}}
- name: serve
  image: {{ include "whyjob.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: [--config, /etc/whyjob/config.yaml, serve]
  ports:
    - {name: http, containerPort: {{ .Values.serve.port }}}
  {{- $env := include "whyjob.indexEnv" . }}
  {{- with include "whyjob.slackSecret" . }}
  {{- $env = printf "%s\n- name: WHYJOB_SLACK_TOKEN\n  valueFrom: {secretKeyRef: {name: %s, key: token, optional: true}}\n- name: WHYJOB_SLACK_SIGNING_SECRET\n  valueFrom: {secretKeyRef: {name: %s, key: signing-secret, optional: true}}" $env . . }}
  {{- end }}
  {{- with trim $env }}
  env:
    {{- . | nindent 4 }}
  {{- end }}
  {{- include "whyjob.probes" (dict "port" "http") | nindent 2 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.serve.resources | nindent 4 }}
  volumeMounts:
    {{- include "whyjob.indexMounts" . | nindent 4 }}
    {{- if include "whyjob.tokensSecret" . }}
    - {name: tokens, mountPath: /etc/whyjob/tokens, readOnly: true}
    {{- end }}
{{- end }}

{{- define "whyjob.tokensVolume" -}}
{{- with include "whyjob.tokensSecret" . }}
- name: tokens
  secret: {secretName: {{ . }}}
{{- end }}
{{- end }}
