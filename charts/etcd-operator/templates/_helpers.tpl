{{/*
The name of the Deployment, ServiceAccount, ClusterRole and bindings:
"etcd-operator" for a release named etcd-operator, as deploy/ names them.
*/}}
{{- define "etcd-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The operator's namespace.
*/}}
{{- define "etcd-operator.namespace" -}}
{{- required "namespace.name must name the operator's namespace" .Values.namespace.name -}}
{{- end -}}

{{/*
The labels of every object, as deploy/ sets them (app.kubernetes.io/name),
and Helm's four (docs/helm.md says why each): scripts/check-helm.sh ignores
exactly these four when it compares the chart with deploy/. The selectors
and the Pod template keep deploy/'s labels only: a Deployment's selector
cannot change, each cluster's NetworkPolicy lets the operator's Pods in by
app.kubernetes.io/name, and a chart upgrade alone must not roll the Pods.
*/}}
{{- define "etcd-operator.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{ include "etcd-operator.helmLabels" . }}
{{- end -}}

{{- define "etcd-operator.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/*
The operator's image, which member Pods run as well.
*/}}
{{- define "etcd-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (required "image.tag must be set" .Values.image.tag) -}}
{{- end -}}

{{/*
Values that cannot work, refused before anything is installed.
*/}}
{{- define "etcd-operator.validate" -}}
{{- $namespace := include "etcd-operator.namespace" . -}}
{{- if and .Values.namespace.create (eq $namespace .Release.Namespace) -}}
{{- fail (printf "namespace.create: the chart creates namespace %s, so the release cannot be stored in it: install into another namespace (--namespace default), or set namespace.create=false and use --create-namespace" $namespace) -}}
{{- end -}}
{{- if and .Values.namespace.create (eq .Values.watchNamespace $namespace) -}}
{{- fail (printf "watchNamespace: %s is the operator's namespace, which the chart creates and `helm uninstall` deletes with every cluster in it: watch another namespace, or set namespace.create=false" $namespace) -}}
{{- end -}}
{{- end -}}
