"""The front doors: one module per client dialect (OpenAI Chat Completions and legacy
Completions, OpenAI Responses, Anthropic Messages). Each parses its dialect into the
canonical request (an OpenAI Chat Completions body, validated by :mod:`gateway.schemas`)
and renders the canonical answer (a ``chat.completion`` and its chunks, read into
:mod:`backends.response`'s typed ``Answer`` and ``Delta``) back into its own dialect, errors
included; :mod:`gateway.api.completions` runs the shared pipeline between
them (decide, admit, dispatch with fallback, record).
"""
