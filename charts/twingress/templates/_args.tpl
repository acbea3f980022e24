{{/*
The container's arguments: k8s/base/daemonset.yaml's, in its order (the hand-over names carry
the full name: release twingress gives exactly k8s/'s), then those the values add. An option
equal to twingress's default is not repeated, so release twingress with the defaults renders
k8s/'s list plus --status-pod-selector (this release's pods only).
*/}}
{{- define "twingress.args" -}}
{{- $c := .Values.controller -}}
{{- $fullname := include "twingress.fullname" . -}}
{{- $takeOver := $c.twingress.takeOverIngressNginx -}}
- --http=tcp:80
- --https=tcp:443
- --workers={{ $c.twingress.workers }}
- --admin=unix:/run/twingress/admin.sock
- --handover=@{{ $fullname }}-handover
- --handover-key-secret=$(POD_NAMESPACE)/{{ $fullname }}-handover
- --after-handover=wait
- --status-pod-selector=app.kubernetes.io/name={{ include "twingress.name" . }},app.kubernetes.io/instance={{ .Release.Name }}
{{- $lease := include "twingress.leaseName" . }}
{{- if ne $lease "twingress-leader" }}
- --leader-election-id={{ $lease }}
{{- end }}
{{- /* with the take-over preset, only a class named explicitly is passed (the preset's is nginx) */}}
{{- $class := include "twingress.className" . }}
{{- if and (ne $class "twingress") (or (not $takeOver) $c.ingressClassResource.name) }}
- --ingress-class={{ $class }}
{{- end }}
{{- if ne $c.ingressClassResource.controllerValue "twingress.io/ingress-controller" }}
- --controller-name={{ $c.ingressClassResource.controllerValue }}
{{- end }}
{{- if $c.metrics.enabled }}
{{- if $c.hostNetwork }}
- --metrics=tcp:{{ $c.metrics.port }}:interface=$(HOST_IP)
{{- else }}
- --metrics=tcp:{{ $c.metrics.port }}
{{- end }}
{{- end }}
{{- if $c.scope.enabled }}
- --watch-namespace={{ default .Release.Namespace $c.scope.namespace }}
{{- end }}
{{- if include "twingress.nginxConfig" . }}
- --nginx-configmap={{ .Release.Namespace }}/{{ $fullname }}-nginx
{{- end }}
{{- if $takeOver }}
- --take-over-ingress-nginx=true
{{- end }}
{{- if .Values.tcp }}
- --tcp-services-configmap={{ .Release.Namespace }}/{{ $fullname }}-tcp
{{- end }}
{{- if .Values.udp }}
- --udp-services-configmap={{ .Release.Namespace }}/{{ $fullname }}-udp
{{- end }}
{{- if and (include "twingress.serviceEnabled" .) $c.publishService.enabled }}
- --publish-service={{ default (printf "%s/%s" .Release.Namespace $fullname) $c.publishService.pathOverride }}
{{- end }}
{{- include "twingress.extraArgs" . }}
{{- end -}}

{{/*
controller.extraArgs, ingress-nginx's way ({name: value} -> --name=value; "" -> --name=true):
twingress options as they are, ingress-nginx flags that have a twingress meaning renamed
(keys.yaml extraArgs.renamed); the options the chart sets itself, and every other name, refused.
*/}}
{{- define "twingress.extraArgs" -}}
{{- $keys := .Files.Get "keys.yaml" | fromYaml -}}
{{- $table := $keys.extraArgs -}}
{{- range $name, $value := .Values.controller.extraArgs -}}
{{- $flag := $name -}}
{{- if hasKey $table.renamed $name -}}
{{- $flag = get $table.renamed $name -}}
{{- else if hasKey $table.chart $name -}}
{{- fail (printf "controller.extraArgs.%s: refused: the chart sets --%s (%s)" $name $name (get $table.chart $name)) -}}
{{- else if not (has $name $table.twingress) -}}
{{- $why := default "not a twingress option (twistd ingress --help lists them)" (get $table.refused $name) -}}
{{- fail (printf "controller.extraArgs.%s: refused: %s" $name $why) -}}
{{- end }}
- --{{ $flag }}={{ ternary "true" $value (eq (toString $value) "") }}
{{- end -}}
{{- end -}}
