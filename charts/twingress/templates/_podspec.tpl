{{/*
The pod: k8s/base/daemonset.yaml's, field for field (tests/chart/test_drift.py compares them).
*/}}
{{- define "twingress.podSpec" -}}
{{- $c := .Values.controller -}}
serviceAccountName: {{ include "twingress.serviceAccountName" . }}
{{- if not .Values.serviceAccount.automountServiceAccountToken }}
automountServiceAccountToken: false
{{- end }}
{{- if $c.hostNetwork }}
hostNetwork: true
{{- end }}
# with hostNetwork, ClusterFirst would fall back to the node's resolv.conf
dnsPolicy: {{ default (ternary "ClusterFirstWithHostNet" "ClusterFirst" $c.hostNetwork) $c.dnsPolicy }}
# longer than --handover-wait (30 s) + --drain-timeout (30 s) + a Lease release without an
# apiserver (~21 s): SIGKILL never cuts the wait for a successor or a drain short
terminationGracePeriodSeconds: {{ $c.terminationGracePeriodSeconds }}
{{- with $c.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $c.dnsConfig }}
dnsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.hostAliases }}
hostAliases:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
  # one MCS level for every twingress pod: the hand-over passes descriptors across pods
  seLinuxOptions:
    level: {{ $c.twingress.seLinuxLevel | quote }}
{{- include "twingress.placement" . }}
{{- with $c.extraInitContainers }}
initContainers:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: twingress
    image: {{ include "twingress.image" . }}
    imagePullPolicy: {{ $c.image.pullPolicy }}
    # the image's entrypoint is `twistd --pidfile= -n ingress`; these are ingress's options
    args:
      {{- include "twingress.args" . | nindent 6 }}
    env:
      - name: POD_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      - name: POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      - name: HOST_IP
        valueFrom:
          fieldRef:
            fieldPath: status.hostIP
      {{- with $c.extraEnvs }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- if not $c.hostNetwork }}
    # Without hostNetwork the ports are the pod's own (no hostPort: the surge pod is scheduled).
    ports:
      - {name: http, containerPort: 80, protocol: TCP}
      - {name: https, containerPort: 443, protocol: TCP}
      {{- if $c.metrics.enabled }}
      - {name: {{ $c.metrics.portName }}, containerPort: {{ $c.metrics.port }}, protocol: TCP}
      {{- end }}
    {{- end }}
    # exec probes of the pod's own admin socket (python -m ingress.probe SOCKET PATH)
    livenessProbe:
      exec:
        command: [/opt/twingress/bin/python3, -m, ingress.probe, /run/twingress/admin.sock, /healthz]
      periodSeconds: 10
      timeoutSeconds: 2
      failureThreshold: 3
    readinessProbe:
      exec:
        command: [/opt/twingress/bin/python3, -m, ingress.probe, /run/twingress/admin.sock, /readyz]
      periodSeconds: 2
      timeoutSeconds: 2
      failureThreshold: 1
    {{- with $c.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: [ALL]
        # bind :80 and :443 as a non-root user
        add: [NET_BIND_SERVICE]
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      - name: run
        mountPath: /run/twingress
      {{- with $c.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  {{- with $c.extraContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumes:
  # the only writable places (Python's tempfile; the admin socket)
  - name: tmp
    emptyDir:
      medium: Memory
      sizeLimit: 16Mi
  - name: run
    emptyDir:
      medium: Memory
      sizeLimit: 1Mi
  {{- with $c.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* nodeSelector, tolerations, affinity, spread: the values, plus the edge overlay's with controller.twingress.edgeNodes. */}}
{{- define "twingress.placement" -}}
{{- $c := .Values.controller -}}
{{- $selector := deepCopy (default dict $c.nodeSelector) -}}
{{- $tolerations := default list $c.tolerations -}}
{{- if $c.twingress.edgeNodes -}}
{{- $_ := set $selector "node-role.kubernetes.io/edge" "" -}}
{{- $tolerations = append $tolerations (dict "key" "node-role.kubernetes.io/edge" "operator" "Exists" "effect" "NoSchedule") -}}
{{- end -}}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
