{{/* The chart's name, or nameOverride. */}}
{{- define "nebula.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object's name: fullnameOverride, else the release name when it already
contains the chart's name, else <release>-<chart>. Release "nebula" gives nebula-vnode and
nebula-operator, the names of the plain manifests in deploy/.
*/}}
{{- define "nebula.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nebula.vnode.name" -}}{{ include "nebula.fullname" . }}-vnode{{- end -}}
{{- define "nebula.operator.name" -}}{{ include "nebula.fullname" . }}-operator{{- end -}}

{{/* Labels every object carries; $component is vnode or operator. */}}
{{- define "nebula.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: nebula
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "nebula.selectorLabels" . }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The labels a Deployment selects its Pods by; an entry of vnode.nodes adds its Node's name. */}}
{{- define "nebula.selectorLabels" -}}
app.kubernetes.io/name: nebula-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .node }}
nebula.dev/node: {{ . }}
{{- end }}
{{- end -}}

{{/* image: repository:tag, the tag defaulting to the chart's appVersion; @digest when one is set. */}}
{{- define "nebula.image" -}}
{{- $ref := printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- if .image.digest -}}
{{- $ref = printf "%s@%s" $ref .image.digest -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* The Pod-level parts both apps share: never on a virtual node, non-root. */}}
{{- define "nebula.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "nebula.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* Affinity: never on a virtual node (its own or another's); replicas spread over hosts. */}}
{{- define "nebula.affinity" -}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - key: type
              operator: NotIn
              values: ["virtual-kubelet"]
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "nebula.selectorLabels" . | nindent 14 }}
{{- end -}}

{{/*
Where an app's Pods run: its priority class, the chart's affinity (unless the app's `affinity`
replaces it), its topology spread (a constraint without labelSelector gets the Deployment's).
The dict: root, component, node (an entry of vnode.nodes), values (.Values.vnode or .operator).
*/}}
{{- define "nebula.placement" -}}
{{- $values := .values }}
{{- with $values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- if $values.affinity }}
affinity:
  {{- toYaml $values.affinity | nindent 2 }}
{{- else }}
{{ include "nebula.affinity" . }}
{{- end }}
{{- with $values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $constraint := deepCopy . }}
  {{- if not (hasKey $constraint "labelSelector") }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "nebula.selectorLabels" $ | fromYaml)) }}
  {{- end }}
  - {{- toYaml $constraint | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
Beside an app's Deployment: its PodDisruptionBudget, its metrics Service and ServiceMonitor. The
dict: root, component, node, values, name (the Deployment's name).
*/}}
{{- define "nebula.serving" -}}
{{- $root := .root }}
{{- if .values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "nebula.selectorLabels" . | nindent 6 }}
{{- end }}
{{- if $root.Values.metrics.service.enabled }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}-metrics
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "nebula.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ $root.Values.metricsPort }}
      targetPort: metrics
{{- end }}
{{- if $root.Values.metrics.serviceMonitor.enabled }}
{{- if not $root.Values.metrics.service.enabled }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor selects the metrics Service" }}
{{- end }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" . | nindent 4 }}
    {{- with $root.Values.metrics.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  namespaceSelector:
    matchNames: [{{ $root.Release.Namespace | quote }}]
  selector:
    matchLabels:
      {{- include "nebula.selectorLabels" . | nindent 6 }}
  endpoints:
    - port: metrics
      path: /metrics
      interval: {{ $root.Values.metrics.serviceMonitor.interval }}
{{- end }}
{{- end -}}
