{{/* Chart name, overridable. */}}
{{- define "mlmodelscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name: the prefix of every object name. */}}
{{- define "mlmodelscope.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "mlmodelscope.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "mlmodelscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mlmodelscope
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of the operator pod. */}}
{{- define "mlmodelscope.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mlmodelscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "mlmodelscope.operatorServiceAccount" -}}
{{- default (printf "%s-operator" (include "mlmodelscope.fullname" .)) .Values.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The evaluation jobs' ServiceAccount (same name in every job namespace). */}}
{{- define "mlmodelscope.jobServiceAccount" -}}
{{- default (printf "%s-evaluation" (include "mlmodelscope.fullname" .)) .Values.evaluationJobs.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Namespaces where evaluation Jobs run, as a JSON list (fromJsonArray to use). */}}
{{- define "mlmodelscope.jobNamespaces" -}}
{{- $ns := .Values.evaluationJobs.namespaces }}
{{- if not $ns }}{{ $ns = .Values.watchNamespaces }}{{ end }}
{{- if not $ns }}{{ $ns = list .Release.Namespace }}{{ end }}
{{- $ns | uniq | toJson }}
{{- end }}

{{/* "true" when Kopf peering is on. */}}
{{- define "mlmodelscope.peering" -}}
{{- if or .Values.peering.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/* The operator image reference. */}}
{{- define "mlmodelscope.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Rules the operator needs in every namespace it serves (Role or ClusterRole). */}}
{{- define "mlmodelscope.operatorRules" -}}
# Watch ModelEvaluations; patch them for Kopf's finalizer/progress annotations and status;
# create and delete the child ModelEvaluations of EvaluationSweeps.
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations"]
  verbs: ["get", "list", "watch", "patch", "create", "delete"]
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations/status"]
  verbs: ["get", "patch"]
# Owner references with blockOwnerDeletion on the Job and ConfigMaps (needed where the
# OwnerReferencesPermissionEnforcement admission plugin is on, e.g. OpenShift).
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations/finalizers"]
  verbs: ["update"]
# Watch EvaluationSweeps; patch them for Kopf's progress annotations and their status.
- apiGroups: ["mlmodelscope.io"]
  resources: ["evaluationsweeps"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["mlmodelscope.io"]
  resources: ["evaluationsweeps/status"]
  verbs: ["get", "patch"]
# Owner references with blockOwnerDeletion on a sweep's child ModelEvaluations.
- apiGroups: ["mlmodelscope.io"]
  resources: ["evaluationsweeps/finalizers"]
  verbs: ["update"]
# Read Models (reusable model manifests) to resolve modelRef; never written.
- apiGroups: ["mlmodelscope.io"]
  resources: ["models"]
  verbs: ["get"]
# The evaluation Job of each ModelEvaluation (owner references clean them up).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "get", "list", "watch", "delete"]
# The spec and results ConfigMaps of each evaluation; `list` finds the results still waiting
# to be recorded in the results store (ConfigMaps labelled as pending a record).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "get", "list", "patch", "delete"]
# Evaluation pods, read only: why a pod is Pending (unschedulable) or how it ended.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Kueue's Workloads, read only: why Kueue has not admitted (or evicted) an evaluation's
# suspended Job, shown in the evaluation's status. Harmless where Kueue is not installed.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list"]
# Kopf posts progress and errors as Events on the ModelEvaluation; the operator lists a Job's
# FailedCreate Events to name why its pod never started (e.g. a missing ServiceAccount).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* Selector labels of the results server (mlms serve). */}}
{{- define "mlmodelscope.serverSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mlmodelscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/* Selector labels of the bundled PostgreSQL. */}}
{{- define "mlmodelscope.postgresqlSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mlmodelscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: postgresql
{{- end }}

{{/* The bundled PostgreSQL's Service (its host name in the release namespace). */}}
{{- define "mlmodelscope.postgresqlName" -}}
{{- printf "%s-postgresql" (include "mlmodelscope.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "true" when a results store is configured; fails on conflicting store values. */}}
{{- define "mlmodelscope.storeEnabled" -}}
{{- $given := 0 }}
{{- if .Values.store.url }}{{ $given = add1 $given }}{{ end }}
{{- if .Values.store.existingSecret }}{{ $given = add1 $given }}{{ end }}
{{- if .Values.postgresql.enabled }}{{ $given = add1 $given }}{{ end }}
{{- if gt $given 1 }}
{{- fail "set only one of store.url, store.existingSecret and postgresql.enabled: they all say where the results store is" }}
{{- end }}
{{- if gt $given 0 }}true{{ end }}
{{- end }}

{{/* The Secret holding the store's database URL. */}}
{{- define "mlmodelscope.storeSecretName" -}}
{{- if .Values.store.existingSecret }}
{{- .Values.store.existingSecret }}
{{- else }}
{{- printf "%s-store" (include "mlmodelscope.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The key of the database URL in that Secret. */}}
{{- define "mlmodelscope.storeSecretKey" -}}
{{- if .Values.store.existingSecret }}{{ .Values.store.secretKey }}{{ else }}url{{ end }}
{{- end }}
