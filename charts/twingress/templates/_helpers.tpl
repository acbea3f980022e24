{{/*
Names. The full name is the release name when it contains the chart's name (release twingress
renders k8s/'s names exactly), else RELEASE-twingress; every cluster-wide name (ClusterRole,
IngressClass) and the Lease carry it, so two releases do not collide.
*/}}
{{- define "twingress.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "twingress.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "twingress.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The selector labels: k8s/'s app.kubernetes.io/name, and the release (pods of two releases apart). */}}
{{- define "twingress.selectorLabels" -}}
app.kubernetes.io/name: {{ include "twingress.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "twingress.labels" -}}
{{ include "twingress.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "twingress.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "twingress.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The IngressClass this release serves: controller.ingressClassResource.name, or the full name. */}}
{{- define "twingress.className" -}}
{{- default (include "twingress.fullname" .) .Values.controller.ingressClassResource.name -}}
{{- end -}}

{{/* The class twingress serves: with the take-over preset and no class named, the preset's nginx. */}}
{{- define "twingress.servedClass" -}}
{{- if and .Values.controller.twingress.takeOverIngressNginx (not .Values.controller.ingressClassResource.name) -}}
nginx
{{- else -}}
{{- include "twingress.className" . -}}
{{- end -}}
{{- end -}}

{{- define "twingress.leaseName" -}}
{{- default (printf "%s-leader" (include "twingress.fullname" .)) .Values.controller.electionID -}}
{{- end -}}

{{/*
The Service: controller.service.enabled; unset, for the Deployment kind, and for a DaemonSet whose
values configure one (an ingress-nginx DaemonSet had it: its chart's default is enabled).
*/}}
{{- define "twingress.serviceEnabled" -}}
{{- $s := .Values.controller.service -}}
{{- if hasKey $s "enabled" -}}
{{- if $s.enabled }}true{{ end -}}
{{- else if or (eq .Values.controller.kind "Deployment") (omit $s "enabled") -}}
true
{{- end -}}
{{- end -}}

{{/*
The controller ConfigMap's data: controller.config, plus proxy-set-headers / add-headers naming
the header ConfigMaps of controller.proxySetHeaders / addHeaders (as ingress-nginx's chart does).
*/}}
{{- define "twingress.nginxConfig" -}}
{{- $c := .Values.controller -}}
{{- $fullname := include "twingress.fullname" . -}}
{{- $data := deepCopy (default dict $c.config) -}}
{{- if $c.proxySetHeaders }}{{ $_ := set $data "proxy-set-headers" (printf "%s/%s-custom-proxy-headers" .Release.Namespace $fullname) }}{{ end -}}
{{- if $c.addHeaders }}{{ $_ := set $data "add-headers" (printf "%s/%s-custom-add-headers" .Release.Namespace $fullname) }}{{ end -}}
{{- if $data }}{{ toJson $data }}{{ end -}}
{{- end -}}

{{- define "twingress.image" -}}
{{- $image := .Values.controller.image -}}
{{- $name := $image.image -}}
{{- if $image.registry }}{{ $name = printf "%s/%s" $image.registry $image.image }}{{ end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $name $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (toString $image.tag) -}}
{{- end -}}
{{- end -}}
