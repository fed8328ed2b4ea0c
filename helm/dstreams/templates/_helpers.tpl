{{/*
Names. Kubernetes caps most names at 63 characters (DNS labels), so every name is cut there.
*/}}
{{- define "dstreams.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's base name. A release called "dstreams" (or "dstreams-…") is not doubled up.
*/}}
{{- define "dstreams.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if hasPrefix $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dstreams.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: only those that never change over the release's life, because a Deployment's
selector is immutable.
*/}}
{{- define "dstreams.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dstreams.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dstreams.labels" -}}
helm.sh/chart: {{ include "dstreams.chart" . }}
{{ include "dstreams.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: driver
{{- end }}

{{- define "dstreams.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "dstreams.claimName" -}}
{{- default (include "dstreams.fullname" .) .Values.persistence.existingClaim }}
{{- end }}

{{/*
The HTTP port dstreams listens on, taken from the config so the two cannot disagree.
*/}}
{{- define "dstreams.httpPort" -}}
{{- $http := default dict .Values.config.http }}
{{- $port := default 8080 $http.port | int }}
{{- if eq $port 0 }}
{{- fail "config.http.port is 0 (a random port); the probes and the Service need a fixed port" }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
Refuse credentials in places that end up in plain text (the ConfigMap, a plain env value).
Called from the ConfigMap and the Deployment so `helm template` fails before anything is applied.
*/}}
{{- define "dstreams.validate" -}}
{{- $config := .Values.config }}
{{- $kafka := default dict $config.kafka }}
{{- range $key := list "sasl_password" "ssl_key_password" "secret_properties" }}
{{- if hasKey $kafka $key }}
{{- fail (printf "config.kafka.%s must not be in values (it would land in a ConfigMap); reference a Secret under secrets: instead" $key) }}
{{- end }}
{{- end }}
{{- $spark := default dict $config.spark }}
{{- if hasKey $spark "secret_conf" }}
{{- fail "config.spark.secret_conf must not be in values (it would land in a ConfigMap); use secrets.extra with DSTREAMS_SPARK__SECRET_CONF" }}
{{- end }}
{{- range $name, $sink := (default dict $config.sinks) }}
{{- if and (kindIs "map" $sink) (hasKey $sink "dsn") }}
{{- fail (printf "config.sinks.%s.dsn must not be in values (it would land in a ConfigMap); set secrets.sinkDsns.%s to a Secret reference" $name $name) }}
{{- end }}
{{- end }}
{{- range $name, $ref := .Values.secrets.sinkDsns }}
{{- if not (hasKey (default dict $config.sinks) $name) }}
{{- fail (printf "secrets.sinkDsns.%s: there is no sink %s in config.sinks" $name $name) }}
{{- end }}
{{- if ne $name (lower $name) }}
{{- fail (printf "secrets.sinkDsns.%s: sink names with a DSN must be lower case; dstreams lower-cases variable names, so DSTREAMS_SINKS__%s__DSN would name another sink" $name (upper $name)) }}
{{- end }}
{{- end }}
{{- range $name, $value := .Values.env }}
{{- if not (hasPrefix "DSTREAMS_" $name) }}
{{- fail (printf "env.%s: only DSTREAMS_* overrides belong in env; put other variables in extraEnv" $name) }}
{{- end }}
{{- include "dstreams.refuseCredentialName" (list "env" $name) }}
{{- end }}
{{- range $entry := .Values.extraEnv }}
{{- if hasKey $entry "value" }}
{{- include "dstreams.refuseCredentialName" (list "extraEnv" $entry.name) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dstreams.refuseCredentialName" -}}
{{- $where := index . 0 }}
{{- $name := index . 1 | upper }}
{{- if regexMatch "PASSWORD|SECRET|DSN|TOKEN|CREDENTIAL" $name }}
{{- fail (printf "%s: %s looks like a credential and would be stored in plain text; reference a Secret under secrets.extra instead" $where $name) }}
{{- end }}
{{- end }}

{{/*
One env entry reading a key of an existing Secret. Arguments: variable name, the entry
({secretName, key}), the default Secret name, and where it came from for error messages.
*/}}
{{- define "dstreams.secretEnv" -}}
{{- $name := index . 0 }}
{{- $ref := index . 1 }}
{{- $secretName := default (index . 2) $ref.secretName }}
{{- $where := index . 3 }}
{{- if not $secretName }}
{{- fail (printf "%s: no Secret named; set %s.secretName or secrets.secretName" $where $where) }}
{{- end }}
{{- if not $ref.key }}
{{- fail (printf "%s.key: the key inside Secret %s is required" $where $secretName) }}
{{- end }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secretName | quote }}
      key: {{ $ref.key | quote }}
{{- end }}

{{/*
A DSTREAMS_* override value as a string: maps and lists as JSON (dstreams parses values that
start with { or [), anything else as its text.
*/}}
{{- define "dstreams.envValue" -}}
{{- if or (kindIs "map" .) (kindIs "slice" .) }}
{{- toJson . }}
{{- else if kindIs "float64" . }}
{{- /* YAML numbers arrive as float64; print 5000 as 5000, not 5e+03. */}}
{{- if eq (floor .) . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}
