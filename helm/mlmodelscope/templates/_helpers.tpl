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

{{/* "true" when evaluation pods share the jobs' ServiceAccount (evaluationJobs.resultsAccess
"service-account"); empty when each evaluation gets its own (the operator creates them). */}}
{{- define "mlmodelscope.sharedJobAccount" -}}
{{- if eq .Values.evaluationJobs.resultsAccess "service-account" }}true{{ end }}
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

{{/* "true" when the operator records runs in a results store (store values, or
MLMS_OPERATOR_STORE_URL given through operator.extraSettings or operator.extraEnv): only then
does it keep results that wait for the store in outbox ConfigMaps, which it lists and deletes. */}}
{{- define "mlmodelscope.recordsRuns" -}}
{{- $given := include "mlmodelscope.storeEnabled" . }}
{{- if hasKey .Values.operator.extraSettings "MLMS_OPERATOR_STORE_URL" }}{{ $given = "true" }}{{ end }}
{{- range .Values.operator.extraEnv }}
{{- if eq (get . "name") "MLMS_OPERATOR_STORE_URL" }}{{ $given = "true" }}{{ end }}
{{- end }}
{{- $given }}
{{- end }}

{{/* Namespaces that get the operator's Role, as a JSON list (fromJsonArray to use): the
watched namespaces, or, when the operator watches the whole cluster, the job namespaces (the
only ones where an evaluation can run: only there may the operator create its children). */}}
{{- define "mlmodelscope.operatorNamespaces" -}}
{{- if .Values.watchNamespaces }}
{{- .Values.watchNamespaces | uniq | toJson }}
{{- else }}
{{- include "mlmodelscope.jobNamespaces" . }}
{{- end }}
{{- end }}

{{/* The operator's Role in each namespace where evaluations run: exactly the verbs its code
uses there (tests/packaging/rbac_table.py is the same table, checked with kubectl auth can-i). */}}
{{- define "mlmodelscope.operatorNamespaceRules" -}}
# ModelEvaluations: Kopf lists and watches them and patches its progress annotations; the
# handlers read them, list them (queue, resync), create a sweep's children. Never deleted.
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations/status", "evaluationsweeps/status"]
  verbs: ["patch"]
# Owner references with blockOwnerDeletion on the Job, the ConfigMaps and a sweep's children
# (needed where the OwnerReferencesPermissionEnforcement admission plugin is on, e.g. OpenShift).
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations/finalizers", "evaluationsweeps/finalizers"]
  verbs: ["update"]
# EvaluationSweeps: watched, read, listed by the resync; patched by Kopf's annotations.
- apiGroups: ["mlmodelscope.io"]
  resources: ["evaluationsweeps"]
  verbs: ["get", "list", "watch", "patch"]
# Models (reusable model manifests), read one by one to resolve modelRef; never written.
- apiGroups: ["mlmodelscope.io"]
  resources: ["models"]
  verbs: ["get"]
# The evaluation Jobs: created, watched, read, listed (queue limits, outdated generations),
# deleted (an outdated generation, a pod that never starts). Never updated.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Evaluation pods, listed and watched by label: why one is Pending or how it ended.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# The spec and results ConfigMaps of each evaluation: created, read, patched (a new
# generation). With a results store, also the outbox ConfigMaps of results waiting for it:
# listed by label, deleted once recorded.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", {{ if include "mlmodelscope.recordsRuns" . }}"list", {{ end }}"create", "patch"{{ if include "mlmodelscope.recordsRuns" . }}, "delete"{{ end }}]
# Events: Kopf and the operator post them on evaluations and sweeps; a Job's FailedCreate
# Events are listed to name why its pod never started.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["list", "create"]
# Kueue's Workloads, listed by label: why Kueue holds a suspended Job back (harmless where
# Kueue is not installed).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
{{- if not (include "mlmodelscope.sharedJobAccount" .) }}
# Per-evaluation results access: each evaluation's own ServiceAccount, and a Role and
# RoleBinding that let it patch that evaluation's results ConfigMap alone (resourceNames);
# created once and read back to check their owner, never changed or deleted (they are owned by
# the evaluation: the garbage collector deletes them). No escalate or bind: the API server lets
# the operator grant configmaps patch because this Role already grants it that.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create"]
{{- end }}
{{- end }}

{{/* The cluster-wide install's ClusterRole: only what the operator does in every namespace.
Kopf watches evaluations, sweeps, Jobs and pods everywhere, and the handlers read and write
the operator's own objects (and post Events on them) wherever they are; every other write
(ConfigMaps, Jobs, a sweep's children) is in the Role of the namespaces where evaluations run. */}}
{{- define "mlmodelscope.operatorClusterRules" -}}
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations", "evaluationsweeps"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["mlmodelscope.io"]
  resources: ["modelevaluations/status", "evaluationsweeps/status"]
  verbs: ["patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if include "mlmodelscope.recordsRuns" . }}
# Outbox ConfigMaps waiting for the results store: without a namespace list the retry thread
# lists them cluster-wide, by label (read only; deleting one is in the namespace Role).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list"]
{{- end }}
# Kopf's resource discovery: it lists and watches CRDs to notice resources appearing.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
# The node a Job's pod ran on, when the Job completed without results: a simulated (kwok)
# node runs no containers, and the Failed condition says so (best effort; namespaced
# installs go without).
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
{{- include "mlmodelscope.namespacePolicyRule" . | nindent 0 }}
{{- end }}

{{/* Per-namespace policy: the operator reads the policy.mlmodelscope.io/* annotations of an
evaluation's Namespace before it creates anything for it (cluster-scoped, so a ClusterRole
even for a namespaced install; names and annotations only, no other object). */}}
{{- define "mlmodelscope.namespacePolicyRule" -}}
# Per-namespace policy: the policy.mlmodelscope.io/* annotations of an evaluation's Namespace.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get"]
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

{{/* The bundled PostgreSQL's image reference: by digest when postgresql.image.digest is set,
else by tag (empty: the chart's appVersion, the version this project's image was built with). */}}
{{- define "mlmodelscope.postgresqlImage" -}}
{{- $image := .Values.postgresql.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
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
