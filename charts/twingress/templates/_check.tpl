{{/*
Every value is honoured or refused, never silently dropped: the values (ours merged with the
user's) are walked key by key against keys.yaml's table, the one list that docs/helm.md and
tests/chart/test_keys.py read too. A key path with an entry of its own is honoured, or refused
unless its value is one of the entry's allow list; a key without one takes, whole, the entry
PARENT.* of its nearest parent that has one; a key with neither is unknown and refused (a typo,
or an ingress-nginx key newer than the table). Every refusal is listed in one failure.
*/}}
{{- define "twingress.check" -}}
{{- $keys := .Files.Get "keys.yaml" | fromYaml -}}
{{- $errors := include "twingress.walk" (dict "node" .Values "path" "" "table" $keys.values "inherited" dict) | trim -}}
{{- $errors = trim (printf "%s\n%s" $errors (include "twingress.checkShape" .)) -}}
{{- if $errors -}}
{{- fail (printf "values this chart cannot honour (docs/helm.md):\n%s" $errors) -}}
{{- end -}}
{{- end -}}

{{- define "twingress.walk" -}}
{{- $table := .table -}}
{{- $inherited := .inherited -}}
{{- $parent := .path -}}
{{- range $key, $value := .node -}}
{{- $path := ternary $key (printf "%s.%s" $parent $key) (eq $parent "") -}}
{{- $entry := get $table $path -}}
{{- $own := get $table (printf "%s.*" $path) -}}
{{- if $entry -}}
{{- include "twingress.judge" (dict "path" $path "value" $value "entry" $entry) -}}
{{- else if and (kindIs "map" $value) (or $own (not $inherited)) -}}
{{- include "twingress.walk" (dict "node" $value "path" $path "table" $table "inherited" (default $inherited $own)) -}}
{{- else if $inherited -}}
{{- include "twingress.judge" (dict "path" $path "value" $value "entry" $inherited) -}}
{{- else -}}
{{ printf "%s: refused: not a key of this chart (nor an ingress-nginx key it knows)" $path }}
{{ end -}}
{{- end -}}
{{- end -}}

{{- define "twingress.judge" -}}
{{- if hasKey .entry "refuse" -}}
{{- $value := toJson .value -}}
{{- $allowed := false -}}
{{- range (default list .entry.allow) -}}
{{- if eq (toJson .) $value }}{{ $allowed = true }}{{ end -}}
{{- end -}}
{{- if not $allowed -}}
{{ printf "%s: refused: %s" .path .entry.refuse }}
{{ end -}}
{{- end -}}
{{- end -}}

{{/* Refusals that depend on more than one key. */}}
{{- define "twingress.checkShape" -}}
{{- $c := .Values.controller -}}
{{- $image := printf "%s/%s" $c.image.registry $c.image.image -}}
{{- if regexMatch "ingress-nginx|ingress-controller/controller" $image -}}
{{ printf "controller.image: refused: %s is ingress-nginx's image; twingress's is built from its Dockerfile (controller.image.registry/image/tag)" $image }}
{{ end -}}
{{- if and $c.ingressClass (ne $c.ingressClass (include "twingress.servedClass" .)) -}}
{{ printf "controller.ingressClass: refused: %s is not the class served (%s): twingress serves one IngressClass, by name (controller.ingressClassResource.name)" $c.ingressClass (include "twingress.servedClass" .) }}
{{ end -}}
{{- end -}}
