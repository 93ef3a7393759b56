{{/* Names and labels. */}}
{{- define "mixroute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mixroute.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if eq .Release.Name (include "mixroute.name" .) }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "mixroute.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "mixroute.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mixroute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mixroute.labels" -}}
{{ include "mixroute.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mixroute.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "mixroute.policyConfigMap" -}}
{{- if .Values.policy.existingConfigMap }}
{{- .Values.policy.existingConfigMap }}
{{- else }}
{{- include "mixroute.fullname" . }}-policy
{{- end }}
{{- end }}

{{/*
Bad input fails the render with a clear message instead of a crash-looping pod.
*/}}
{{- define "mixroute.validate" -}}
{{- $_ := required "database.url or database.existingSecret is required: the PostgreSQL URL of the store (postgresql+psycopg://USER:PASSWORD@HOST:5432/DB), preferably from a Secret" (or .Values.database.url .Values.database.existingSecret) }}
{{- $_ := required "redis.url or redis.existingSecret is required: gateway replicas share rate limits, budgets and policy versions through Redis (redis://HOST:6379/0)" (or .Values.redis.url .Values.redis.existingSecret) }}
{{- $_ := required "adminKey.existingSecret is required: a Secret holding MIXROUTE_ADMIN_KEY (kubectl create secret generic mixroute-admin --from-literal=admin-key=...); mixroute serve will not listen on a pod IP without it" .Values.adminKey.existingSecret }}
{{- if and .Values.keda.enabled (not .Values.keda.prometheusAddress) }}
{{- fail "keda.prometheusAddress is required when keda.enabled: the Prometheus that scrapes mixroute_pool_queue_depth" }}
{{- end }}
{{- end }}

{{/* Environment shared by the gateway and the migration Job. */}}
{{- define "mixroute.storeEnv" -}}
- name: MIXROUTE_DATABASE_URL
{{- if .Values.database.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
{{- else }}
  value: {{ .Values.database.url | quote }}
{{- end }}
{{- end }}

{{- define "mixroute.env" -}}
{{ include "mixroute.storeEnv" . }}
- name: MIXROUTE_REDIS_URL
{{- if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else }}
  value: {{ .Values.redis.url | quote }}
{{- end }}
- name: MIXROUTE_REDIS_PREFIX
  value: {{ .Values.redis.prefix | quote }}
- name: MIXROUTE_ADMIN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.adminKey.existingSecret }}
      key: {{ .Values.adminKey.existingSecretKey }}
- name: MIXROUTE_POLICY_PATH
  value: /etc/mixroute/policy.yaml
- name: MIXROUTE_HOST
  value: "0.0.0.0"
- name: MIXROUTE_PORT
  value: "8000"
- name: MIXROUTE_CLASSIFIER
  value: {{ .Values.classifier | quote }}
- name: MIXROUTE_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- range .Values.providerKeys }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .secretKey }}
{{- end }}
{{- if .Values.env }}
{{ toYaml .Values.env }}
{{- end }}
{{- end }}
