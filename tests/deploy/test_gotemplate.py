"""The Go-template subset renderer used to render the chart (helm semantics it relies on)."""

from __future__ import annotations

import pytest

from tests.deploy.gotemplate import Renderer, Scope, TemplateError, parse


def render(src: str, values: dict | None = None) -> str:
    nodes, defines = parse(src)
    root = {"Values": values or {}, "Release": {"Name": "r", "Namespace": "ns"}}
    return Renderer(defines).render(nodes, Scope(root, root, {}))


def test_trim_markers_eat_whitespace_on_their_side_only():
    assert render("a  \n  {{- \"b\" }}  \n") == "ab  \n"
    assert render("a {{ \"b\" -}} \n c") == "a bc"


def test_if_else_if_else_and_go_truthiness():
    src = "{{ if .Values.a }}A{{ else if .Values.b }}B{{ else }}C{{ end }}"
    assert render(src, {"a": "x"}) == "A"
    assert render(src, {"a": "", "b": [1]}) == "B"
    assert render(src, {"a": 0, "b": {}}) == "C"


def test_range_rebinds_dot_and_binds_variable_and_root():
    src = "{{ range $p := .Values.ps }}{{ $p.n }}{{ .n }}{{ $.Release.Name }};{{ end }}"
    assert render(src, {"ps": [{"n": 1}, {"n": 2}]}) == "11r;22r;"


def test_missing_values_render_empty_like_helm():
    assert render("[{{ .Values.nope.deeper }}]") == "[]"


def test_pipelines_functions_and_parentheses():
    assert render('{{ .Values.x | default "d" | quote }}', {"x": ""}) == '"d"'
    assert render('{{ printf "%s-%s" .Release.Name "c" | trunc 3 | trimSuffix "-" }}') == "r-c"
    assert render("{{ toYaml .Values.m | nindent 2 }}", {"m": {"b": 1, "a": [1]}}) == "\n  a:\n  - 1\n  b: 1"
    assert render('{{ (or .Values.a .Values.b) }}', {"a": "", "b": "B"}) == "B"


def test_required_fails_on_nil_and_empty_string():
    with pytest.raises(TemplateError, match="need x"):
        render('{{ required "need x" .Values.x }}', {"x": ""})
    assert render('{{ required "need x" .Values.x }}', {"x": 0}) == "0"


def test_define_include_and_assignment():
    src = '{{- define "n" -}}<{{ .Values.v }}>{{- end }}{{ $_ := include "n" . }}{{ include "n" . }}'
    assert render(src, {"v": 7}) == "<7>"


def test_anything_outside_the_subset_is_refused():
    with pytest.raises(TemplateError):
        render("{{ with .Values.a }}x{{ end }}")
    with pytest.raises(TemplateError):
        render("{{ sha256sum .Values.a }}")
    with pytest.raises(TemplateError):
        render("{{ if .Values.a }}x")
