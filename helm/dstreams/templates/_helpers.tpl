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
{{- /* Not `default`: it would take a 0 for "not set" and point the probes at 8080. */}}
{{- $port := 8080 }}
{{- if hasKey $http "port" }}{{ $port = int $http.port }}{{ end }}
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
{{- include "dstreams.validateStandby" . }}
{{- include "dstreams.validateSparkMode" . }}
{{- include "dstreams.validateExtras" . }}
{{- include "dstreams.validateIngest" . }}
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

{{/*
Spark on Kubernetes (spark.mode kubernetes): names, the config the driver runs with, the executor
pod template.
*/}}
{{- define "dstreams.onKubernetes" -}}
{{- if eq .Values.spark.mode "kubernetes" }}true{{ end }}
{{- end }}

{{- define "dstreams.driverServiceName" -}}
{{- printf "%s-driver" (include "dstreams.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{- define "dstreams.sparkServiceAccountName" -}}
{{- default (include "dstreams.fullname" .) .Values.spark.kubernetes.serviceAccount.name }}
{{- end }}

{{/*
Executor pods' labels: never the driver's selector labels, or the driver's Services would send
their traffic to executors too.
*/}}
{{- define "dstreams.executorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-executor" (include "dstreams.name" . | trunc 54) }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: executor
{{- end }}

{{/*
The config file as dstreams reads it: `config` as given, and in kubernetes mode the master, the
driver's address (the headless Service) and the executors' Spark settings set over it.
Arguments: the root context and a deep copy of .Values.config, which this changes in place.
*/}}
{{- define "dstreams.applySparkMode" -}}
{{- $root := index . 0 }}
{{- $config := index . 1 }}
{{- if include "dstreams.onKubernetes" $root }}
{{- $k := $root.Values.spark.kubernetes }}
{{- $spark := default dict $config.spark }}
{{- $conf := default dict $spark.conf }}
{{- $_ := set $conf "spark.kubernetes.namespace" $root.Release.Namespace }}
{{- $_ := set $conf "spark.kubernetes.container.image" (include "dstreams.image" $root) }}
{{- $_ := set $conf "spark.kubernetes.container.image.pullPolicy" $root.Values.image.pullPolicy }}
{{- $_ := set $conf "spark.kubernetes.authenticate.driver.serviceAccountName" (include "dstreams.sparkServiceAccountName" $root) }}
{{- $_ := set $conf "spark.kubernetes.executor.podTemplateFile" "/etc/dstreams/executor-pod.yaml" }}
{{- $_ := set $conf "spark.kubernetes.executor.podTemplateContainerName" "dstreams-executor" }}
{{- $_ := set $conf "spark.kubernetes.executor.podNamePrefix" (include "dstreams.fullname" $root | trunc 40 | trimSuffix "-") }}
{{- $_ := set $conf "spark.executor.instances" ($k.executors | toString) }}
{{- $_ := set $conf "spark.executor.cores" ($k.executorCores | toString) }}
{{- $_ := set $conf "spark.executor.memory" $k.executorMemory }}
{{- $_ := set $conf "spark.executor.memoryOverhead" $k.executorMemoryOverhead }}
{{- $_ := set $conf "spark.driver.port" ($k.driverPort | toString) }}
{{- $_ := set $conf "spark.driver.blockManager.port" ($k.blockManagerPort | toString) }}
{{- $_ := set $spark "conf" $conf }}
{{- $_ := set $spark "master" "k8s://https://kubernetes.default.svc" }}
{{- $_ := set $spark "driver_host" (printf "%s.%s.svc" (include "dstreams.driverServiceName" $root) $root.Release.Namespace) }}
{{- $_ := set $spark "bind_address" "0.0.0.0" }}
{{- $_ := set $config "spark" $spark }}
{{- end }}
{{- end }}

{{/*
The pod every executor starts from (Spark adds its own container settings, the executor's
resources and its scratch directories): the driver's image, security settings and volumes, so
executors write file outputs and checkpoints where the driver reads them.
*/}}
{{- define "dstreams.executorPodTemplate" -}}
apiVersion: v1
kind: Pod
metadata:
  labels:
    {{- include "dstreams.executorLabels" . | nindent 4 }}
    {{- with .Values.spark.kubernetes.executorPodLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.spark.kubernetes.executorPodAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- if .Values.serviceAccount.annotations }}
  # The account's cloud identity (serviceAccount.annotations), for executors' object storage.
  serviceAccountName: {{ include "dstreams.sparkServiceAccountName" . }}
  {{- end }}
  # Executors never call the Kubernetes API: no token.
  automountServiceAccountToken: false
  enableServiceLinks: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: dstreams-executor
      image: {{ include "dstreams.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      env:
        - name: HOME
          value: /tmp
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: state
          mountPath: /var/lib/dstreams
        - name: scratch
          mountPath: /tmp
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: state
      {{- if .Values.persistence.enabled }}
      persistentVolumeClaim:
        claimName: {{ include "dstreams.claimName" . }}
      {{- else }}
      emptyDir: {}
      {{- end }}
    - name: scratch
      {{- $scratch := dict }}
      {{- with .Values.scratch.medium }}{{ $_ := set $scratch "medium" . }}{{ end }}
      {{- with .Values.scratch.sizeLimit }}{{ $_ := set $scratch "sizeLimit" . }}{{ end }}
      emptyDir: {{ toJson $scratch }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
The Spark UI (sparkUI.enabled): dstreams turns it off, the config turns it back on at the port.
Arguments: the root context and the config being built, changed in place.
*/}}
{{- define "dstreams.applySparkUI" -}}
{{- $root := index . 0 }}
{{- $config := index . 1 }}
{{- if $root.Values.sparkUI.enabled }}
{{- $spark := default dict $config.spark }}
{{- $conf := default dict $spark.conf }}
{{- $_ := set $conf "spark.ui.enabled" "true" }}
{{- $_ := set $conf "spark.ui.port" ($root.Values.sparkUI.port | toString) }}
{{- $_ := set $spark "conf" $conf }}
{{- $_ := set $config "spark" $spark }}
{{- end }}
{{- end }}

{{/*
The file journal's path on the volume, when a file journal names none. Not a default in
values.yaml: Helm merges maps, so a release switching to journal.type kafka would keep a path
the Kafka journal does not take (and values.schema.json refuses).
*/}}
{{- define "dstreams.applyJournalPath" -}}
{{- $config := index . 1 }}
{{- $journal := default dict $config.journal }}
{{- if and (eq (toString (default "file" $journal.type)) "file") (not $journal.path) }}
{{- $_ := set $journal "path" "/var/lib/dstreams/journal" }}
{{- $_ := set $config "journal" $journal }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount made for local mode: only to carry serviceAccount.annotations (a cloud
identity). Empty when none is made.
*/}}
{{- define "dstreams.localServiceAccountName" -}}
{{- if and (not (include "dstreams.onKubernetes" .)) .Values.serviceAccount.annotations }}
{{- include "dstreams.fullname" . }}
{{- end }}
{{- end }}

{{/*
What the extra volumes, the Spark UI and the ServiceAccount's annotations need of the values.
*/}}
{{- define "dstreams.validateExtras" -}}
{{- range $volume := .Values.extraVolumes }}
{{- if has $volume.name (list "config" "state" "scratch") }}
{{- fail (printf "extraVolumes: the name %s is the chart's own volume; choose another" $volume.name) }}
{{- end }}
{{- end }}
{{- $ui := .Values.sparkUI }}
{{- if $ui.enabled }}
{{- $taken := list (include "dstreams.httpPort" . | int) }}
{{- if include "dstreams.onKubernetes" . }}
{{- $taken = concat $taken (list (int .Values.spark.kubernetes.driverPort) (int .Values.spark.kubernetes.blockManagerPort)) }}
{{- end }}
{{- if has (int $ui.port) $taken }}
{{- fail (printf "sparkUI.port %d is already the driver's HTTP or Spark port; choose another" (int $ui.port)) }}
{{- end }}
{{- end }}
{{- if .Values.serviceAccount.annotations }}
{{- if include "dstreams.onKubernetes" . }}
{{- if not .Values.spark.kubernetes.serviceAccount.create }}
{{- fail "serviceAccount.annotations go on the ServiceAccount the chart creates; with spark.kubernetes.serviceAccount.create false, annotate your own account instead" }}
{{- end }}
{{- else if .Values.serviceAccountName }}
{{- fail "serviceAccount.annotations go on the ServiceAccount the chart creates; with serviceAccountName set, annotate that account instead" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
What kubernetes mode needs of the values: storage every pod can mount, the chart's own account.
*/}}
{{- define "dstreams.validateSparkMode" -}}
{{- if include "dstreams.onKubernetes" . }}
{{- $persistence := .Values.persistence }}
{{- if $persistence.enabled }}
{{- if and (not $persistence.existingClaim) (not (has "ReadWriteMany" $persistence.accessModes)) }}
{{- fail "spark.mode kubernetes: executor pods write file outputs and checkpoints on the volume, so every pod must mount it; set persistence.accessModes to [ReadWriteMany] (with a storageClass that provides it, e.g. NFS or CephFS), or persistence.existingClaim to a ReadWriteMany claim" }}
{{- end }}
{{- else }}
{{- range $name, $sink := (default dict .Values.config.sinks) }}
{{- if and (kindIs "map" $sink) (eq (toString $sink.type) "files") }}
{{- fail (printf "spark.mode kubernetes without persistence: config.sinks.%s writes files, which executor pods would each keep in their own emptyDir; enable persistence with a ReadWriteMany volume" $name) }}
{{- end }}
{{- end }}
{{- $checkpoint := default dict .Values.config.checkpoint }}
{{- /* dstreams writes checkpoints to S3-compatible object storage itself (boto3): s3:// or s3a://, reached as config.checkpoint.s3 says, with credentials every pod finds in its environment (envFrom), a mounted file (checkpoint.s3.credentials_file) or its role; see the README. */}}
{{- if not (regexMatch "^[sS]3[aA]?://[^/]+" (toString (default "" $checkpoint.path))) }}
{{- fail "spark.mode kubernetes without persistence: config.checkpoint.path must be an object-store URI (s3://bucket/prefix or s3a://..., with config.checkpoint.s3 for the endpoint and the credentials in every pod, see the chart README) that every executor pod can reach, or enable persistence with a ReadWriteMany volume" }}
{{- end }}
{{- end }}
{{- if .Values.serviceAccountName }}
{{- fail "serviceAccountName is for local mode; in kubernetes mode the driver uses spark.kubernetes.serviceAccount (created, or named there)" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dstreams.validateStandby" -}}
{{- if .Values.standby.enabled }}
{{- $journal := default dict .Values.config.journal }}
{{- if ne (toString $journal.type) "kafka" }}
{{- fail "standby.enabled needs config.journal.type kafka: the drivers elect the active one through a consumer group on the journal topic, and two pods cannot share a file journal's lock" }}
{{- end }}
{{- if include "dstreams.onKubernetes" . }}
{{- fail "standby.enabled works with spark.mode local only: in kubernetes mode each driver pod would ask for its own executors and share one driver Service" }}
{{- end }}
{{- $persistence := .Values.persistence }}
{{- if and $persistence.enabled (not $persistence.existingClaim) (not (has "ReadWriteMany" $persistence.accessModes)) }}
{{- fail "standby.enabled with persistence: both driver pods mount the volume (checkpoints), so set persistence.accessModes to [ReadWriteMany], use an existingClaim that is, or disable persistence" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The application's environment, shared by the driver, the standby, the pre-upgrade check and the
ingest endpoint: DSTREAMS_* overrides (env) and credentials by Secret reference (secrets). A
list of EnvVar objects for a container's `env:`; extraEnv follows it there, last.
*/}}
{{- define "dstreams.appEnv" -}}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ include "dstreams.envValue" $value | quote }}
{{- end }}
{{- $default := .Values.secrets.secretName }}
{{- with .Values.secrets.kafkaSaslPassword }}
{{- if .enabled }}
{{ include "dstreams.secretEnv" (list "DSTREAMS_KAFKA__SASL_PASSWORD" . $default "secrets.kafkaSaslPassword") | trim }}
{{- end }}
{{- end }}
{{- range $sink, $ref := .Values.secrets.sinkDsns }}
{{- $name := printf "DSTREAMS_SINKS__%s__DSN" (upper $sink) }}
{{ include "dstreams.secretEnv" (list $name $ref $default (printf "secrets.sinkDsns.%s" $sink)) | trim }}
{{- end }}
{{- range $name, $ref := .Values.secrets.extra }}
{{ include "dstreams.secretEnv" (list $name $ref $default (printf "secrets.extra.%s" $name)) | trim }}
{{- end }}
{{- end }}

{{/*
The driver's volumes (the config, the state volume, scratch, extraVolumes) and where its
container mounts them; the pre-upgrade check mounts the same. Arguments: the root context and
the name of the ConfigMap holding config.yaml.
*/}}
{{- define "dstreams.driverVolumes" -}}
{{- $configMap := index . 1 }}
{{- with index . 0 -}}
- name: config
  configMap:
    name: {{ $configMap }}
- name: state
  {{- if .Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "dstreams.claimName" . }}
  {{- else }}
  # No persistence: the journal dies with the pod. Only sound with journal.type kafka.
  emptyDir: {}
  {{- end }}
{{ include "dstreams.scratchVolume" . }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dstreams.scratchVolume" -}}
- name: scratch
  {{- $scratch := dict }}
  {{- with .Values.scratch.medium }}{{ $_ := set $scratch "medium" . }}{{ end }}
  {{- with .Values.scratch.sizeLimit }}{{ $_ := set $scratch "sizeLimit" . }}{{ end }}
  emptyDir: {{ toJson $scratch }}
{{- end }}

{{- define "dstreams.driverVolumeMounts" -}}
- name: config
  mountPath: /etc/dstreams
  readOnly: true
- name: state
  mountPath: /var/lib/dstreams
- name: scratch
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The ingest endpoint's names and labels: never the driver's selector labels, or the driver's
Service would send traffic to it (and its Service to the driver).
*/}}
{{- define "dstreams.ingestName" -}}
{{- printf "%s-ingest" (include "dstreams.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{- define "dstreams.ingestSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-ingest" (include "dstreams.name" . | trunc 56) }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dstreams.ingestLabels" -}}
helm.sh/chart: {{ include "dstreams.chart" . }}
{{ include "dstreams.ingestSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: ingest
{{- end }}

{{/*
The port `dstreams ingest` listens on (config.ingest.port), so the two cannot disagree.
*/}}
{{- define "dstreams.ingestPort" -}}
{{- $ingest := default dict .Values.config.ingest }}
{{- /* Not `default`: it would take a 0 for "not set". */}}
{{- $port := 8081 }}
{{- if hasKey $ingest "port" }}{{ $port = int $ingest.port }}{{ end }}
{{- if eq $port 0 }}
{{- fail "config.ingest.port is 0 (a random port); the ingest probes and Service need a fixed port" }}
{{- end }}
{{- $port }}
{{- end }}

{{- define "dstreams.validateIngest" -}}
{{- with .Values.ingest }}
{{- if .enabled }}
{{- if gt (int .replicas) 1 }}
{{- fail "ingest.replicas: every ingest endpoint of an application shares one Kafka transactional id and one idempotency-key table, so a second replica would fence the first and each restart would fence the other; keep 1" }}
{{- end }}
{{- if and .tls.enabled (not .tls.secretName) }}
{{- fail "ingest.tls.enabled: name the Secret holding the certificate and key in ingest.tls.secretName" }}
{{- end }}
{{- if and .tokens.enabled (not .tokens.secretName) }}
{{- fail "ingest.tokens.enabled: name the Secret holding the clients' tokens in ingest.tokens.secretName" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The ingest endpoint's TLS and token files as its settings (DSTREAMS_INGEST__...), at the paths
the chart mounts their Secrets. Argument: .Values.ingest.
*/}}
{{- define "dstreams.ingestTlsEnv" -}}
{{- if .tls.enabled }}
- name: DSTREAMS_INGEST__TLS__CERT_FILE
  value: {{ printf "%s/tls.crt" .tls.mountPath | quote }}
- name: DSTREAMS_INGEST__TLS__KEY_FILE
  value: {{ printf "%s/tls.key" .tls.mountPath | quote }}
{{- if .tls.requireClientCertificates }}
- name: DSTREAMS_INGEST__TLS__CLIENT_CA_FILE
  value: {{ printf "%s/ca.crt" .tls.mountPath | quote }}
{{- end }}
{{- end }}
{{- if .tokens.enabled }}
- name: DSTREAMS_INGEST__AUTH__TOKENS_DIR
  value: {{ .tokens.mountPath | quote }}
{{- end }}
{{- end }}

{{/*
How a probe reaches the ingest endpoint: HTTP, HTTPS under TLS, or only a TCP connection under
mutual TLS (the kubelet has no client certificate). Argument: (list .Values.ingest path).
*/}}
{{- define "dstreams.ingestProbe" -}}
{{- $ingest := index . 0 -}}
{{- if and $ingest.tls.enabled $ingest.tls.requireClientCertificates -}}
tcpSocket:
  port: ingest
{{- else -}}
httpGet:
  path: {{ index . 1 }}
  port: ingest
  {{- if $ingest.tls.enabled }}
  scheme: HTTPS
  {{- end }}
{{- end }}
{{- end }}
