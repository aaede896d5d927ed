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

{{/* image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "nebula.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
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
