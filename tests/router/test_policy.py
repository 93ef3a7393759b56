"""Policy loading: typed validation, FILE:LINE errors, env substitution, hashing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gateway.cli import app
from router.policy import DEMO_POLICY, PolicyError, load_policy, parse_policy

ROUTELLM_CSV = "prompt,big-model\n\"What is 2+2?\",True\n"

GOOD = """version: 1
backends:
  - name: big
    kind: fake
    model: big-model
    quality: 0.9
  - name: small
    kind: fake
    model: small-model
    quality: 0.7
routes:
  - name: auto
    backends: [big, small]
"""


def _problem(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="policy.yaml")
    return str(info.value)


def test_demo_policy_loads():
    loaded = load_policy(DEMO_POLICY)
    assert {b.name for b in loaded.policy.backends} >= {"gpt-4o", "gpt-4o-mini"}
    assert len(loaded.hash) == 16


def test_unknown_backend_in_route_points_at_its_line():
    text = GOOD.replace("backends: [big, small]", "backends:\n      - big\n      - gpt5")
    msg = _problem(text)
    assert msg == "policy.yaml:15 routes[0].backends[1]: unknown backend 'gpt5' (known: big, small)"


def test_unknown_key_points_at_its_line():
    msg = _problem(GOOD.replace("    quality: 0.7\n", "    quality: 0.7\n    colour: red\n"))
    assert msg == "policy.yaml:11 backends[1].colour: unknown key 'colour'"


@pytest.mark.parametrize("key", ["1", "~", "true"])
def test_a_key_that_is_not_a_string_points_at_its_line(key):
    msg = _problem(GOOD.replace("    quality: 0.7\n", f"    quality: 0.7\n    {key}: 2\n"))
    assert msg.startswith("policy.yaml:11 backends[1]"), msg


def test_wrong_type_and_range():
    msg = _problem(GOOD.replace("quality: 0.9", "quality: 1.5"))
    assert msg.startswith("policy.yaml:6 backends[0].quality: ")


@pytest.mark.parametrize("old, new, where", [
    ("version: 1", "version: true", "policy.yaml:1 version: "),
    ("quality: 0.9", "quality: 0.9\n    context_tokens: true", "policy.yaml:7 backends[0].context_tokens: "),
    ("quality: 0.9", "quality: 0.9\n    max_concurrency: true", "policy.yaml:7 backends[0].max_concurrency: "),
    ("backends: [big, small]", "backends: [big, small]\n    max_attempts: true", "policy.yaml:14 routes[0].max_attempts: "),
])
def test_true_is_not_an_integer(old, new, where):
    """From a new-user pass: YAML `true` where a whole number belongs was read as 1 and the
    policy validated: `context_tokens: true` gave the backend a 1-token context window
    (every request then failed context_length_exceeded), `version: true` passed as 1."""
    msg = _problem(GOOD.replace(old, new))
    assert msg.startswith(where) and "true" in msg.lower(), msg


def test_bad_yaml_reports_line():
    msg = _problem(GOOD.replace("  - name: small", "  - name: [small"))
    assert msg.startswith("policy.yaml:") and "invalid YAML" in msg


def test_missing_required_field_and_version():
    assert "version" in _problem(GOOD.replace("version: 1\n", ""))
    assert "backends[0].model" in _problem(GOOD.replace("    model: big-model\n", ""))


def test_vllm_needs_endpoints_and_bar_exactly_one():
    assert "endpoints" in _problem(GOOD.replace("kind: fake\n    model: big-model", "kind: vllm\n    model: big-model"))
    text = GOOD + "    quality_bar: {target: 0.9, min_quality: 0.5}\n"
    assert "exactly one" in _problem(text)


@pytest.mark.parametrize("url, problem", [
    ("vllm-0:8000/v1", "must start with http:// or https://"),
    ("http://", "has no host"),
    ("http://:8000/v1", "has no host"),
    ("http://vllm 0:8000/v1", "contains whitespace"),
    ("http://vllm-0:99999/v1", "invalid port"),
    ("http://vllm-0:8000/v1?key=1", "must not have a query"),
    ("http://vllm-0:8000", "ending in /v1 (e.g. http://vllm-0:8000/v1)"),
])
def test_vllm_endpoints_must_be_usable_urls(url, problem):
    text = GOOD.replace("kind: fake\n    model: big-model",
                        f"kind: vllm\n    model: big-model\n    endpoints: ['{url}']")
    msg = _problem(text)
    assert msg.startswith("policy.yaml:") and problem in msg
    good = text.replace(f"'{url}'", "'https://[::1]:8000/v1', 'http://user:pw@vllm-0/v1'")
    assert parse_policy(good, source="policy.yaml").policy.backends[0].endpoints[0] == "https://[::1]:8000/v1"


def test_duplicate_names_and_default_route():
    assert "duplicate backend name 'big'" in _problem(GOOD.replace("name: small", "name: big"))
    twice = _problem(GOOD.replace("name: small", "name: big") + "  - {name: other, backends: [nope]}\n")
    assert "unknown backend 'nope' (known: big)" in twice  # was "(known: big, big)"
    assert "default_route: unknown route 'nope'" in _problem(GOOD + "default_route: nope\n")


def test_env_substitution(monkeypatch):
    monkeypatch.setenv("MR_TEST_MODEL", "from-env")
    loaded = parse_policy(GOOD.replace("model: big-model", "model: ${MR_TEST_MODEL}"))
    assert loaded.policy.backend("big").model == "from-env"
    loaded = parse_policy(GOOD.replace("model: big-model", "model: ${MR_UNSET_X:-fallback}"))
    assert loaded.policy.backend("big").model == "fallback"
    msg = _problem(GOOD.replace("model: big-model", "model: ${MR_UNSET_Y}"))
    assert msg == "policy.yaml:5 backends[0].model: environment variable MR_UNSET_Y is not set"


def test_an_unset_variable_does_not_hide_the_files_other_problems():
    """The missing variable is reported with the rest (it used to be the only line, so a
    user without the provider's key set saw none of the file's real errors); the empty value
    it leaves is not reported again."""
    from router.policy.loader import PolicyError

    text = GOOD.replace("model: big-model", "model: ${MR_UNSET_Z}").replace("quality: 0.7", "quality: 7")
    with pytest.raises(PolicyError) as err:
        parse_policy(text, source="policy.yaml")
    lines = str(err.value).splitlines()
    assert "policy.yaml:5 backends[0].model: environment variable MR_UNSET_Z is not set" in lines
    assert any("quality" in line and "less than or equal to 1" in line for line in lines), lines
    assert not any(line.startswith("policy.yaml:5") and "MR_UNSET_Z" not in line for line in lines), lines


def test_an_unset_variable_does_not_hide_other_problems_on_its_line():
    """A flow mapping puts a whole backend on one line: an unset api_key there used to hide
    the backend's other errors (here an unknown kind), as if they were the empty value's."""
    from router.policy.loader import PolicyError

    text = ("version: 1\nbackends:\n"
            "  - {name: a, kind: litellm, model: openai/x, api_key: \"${MR_UNSET_W}\", quality: 7}\n"
            "routes:\n  - {name: auto, backends: [a]}\n")
    with pytest.raises(PolicyError) as err:
        parse_policy(text, source="policy.yaml")
    lines = str(err.value).splitlines()
    assert "policy.yaml:3 backends[0].api_key: environment variable MR_UNSET_W is not set" in lines
    assert any(line.startswith("policy.yaml:3 backends[0].kind:") for line in lines), lines


def test_hash_ignores_secrets_and_formatting(monkeypatch):
    a = parse_policy(GOOD)
    b = parse_policy("# comment\n" + GOOD.replace("quality: 0.7", "quality:   0.7"))
    c = parse_policy(GOOD.replace("quality: 0.7", "quality: 0.71"))
    assert a.hash == b.hash != c.hash


@settings(max_examples=40, deadline=None)
@given(q=st.floats(min_value=0, max_value=1), target=st.floats(min_value=0.01, max_value=1))
def test_round_trip_through_yaml(q, target):
    import yaml

    loaded = parse_policy(GOOD.replace("quality: 0.9", f"quality: {q!r}") + f"    quality_bar: {{target: {target!r}}}\n")
    dumped = yaml.safe_dump(loaded.policy.model_dump(mode="json", exclude_none=True))
    again = parse_policy(dumped)
    assert again.policy == loaded.policy and again.hash == loaded.hash


def test_cli_validate(tmp_path):
    runner = CliRunner()
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    result = runner.invoke(app, ["policy", "validate", str(good)])
    assert result.exit_code == 0 and "ok" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("backends: [big, small]", "backends: [big, nope]"))
    result = runner.invoke(app, ["policy", "validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:13 routes[0].backends[1]: unknown backend 'nope'" in result.output


def test_cli_validate_loads_replay_data_and_names_the_model_line(tmp_path):
    """From a break-it pass: a replay backend whose model is not in its data validated ok,
    and `serve` then refused it without a line."""
    (tmp_path / "data.csv").write_text('prompt,model-a,model-b\n"hi",True,False\n')
    policy = tmp_path / "p.yaml"
    replay = "  - name: rp\n    kind: replay\n    model: {model}\n    data: [data.csv]\nroutes:"
    policy.write_text(GOOD.replace("routes:", replay.format(model="gpt-99")).replace("[big, small]", "[big, rp]"))
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)])
    assert result.exit_code == 1
    assert result.output == (f"{policy}:13 backends[2].model: model 'gpt-99' is not in the backend's data "
                             "(models: model-a, model-b)\n")
    policy.write_text(GOOD.replace("routes:", replay.format(model="model-b")).replace("[big, small]", "[big, rp]"))
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)])
    assert result.exit_code == 0 and "ok" in result.output


@pytest.mark.parametrize("text, problem", [
    (GOOD.replace("model: big-model", "model: !env FOO"), "policy.yaml:5 backends[0].model: unsupported YAML tag '!env'"),
    ("version: 1\na: &a [*a]\n", "recursive alias"),
    (GOOD.replace("    quality: 0.9\n", "    quality: 0.9\n    model: other\n"),
     "policy.yaml:7 backends[0].model: duplicate key 'model'"),
    (GOOD.replace("model: big-model", "model: ${}"), "malformed ${VAR}"),
    (GOOD.replace("model: big-model", "model: ${1BAD}"), "malformed ${VAR}"),
])
def test_yaml_traps_are_clear_errors(text, problem):
    assert problem in _problem(text)


def test_alias_bomb_is_rejected_quickly():
    import time

    lines = ["version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    start = time.monotonic()
    msg = _problem("\n".join(lines) + "\n")
    assert "alias bomb" in msg and time.monotonic() - start < 5


def test_hundreds_of_nested_levels_are_a_clear_error():
    """A 900-level nested list hit Python's recursion limit in the YAML composer: a traceback
    from `mixroute policy validate` instead of a file:line message."""
    assert "nested too deeply" in _problem("version: 1\nbackends: " + "[" * 900 + "]" * 900 + "\n")


VLLM_OPTIONS = GOOD.replace("kind: fake\n    model: big-model", """kind: vllm
    model: big-model
    endpoints: [http://vllm-0:8000/v1]
    options:
      affinity: maybe
      bogus: 1
      eject_after: 0""")
POOL_KEYS = ("affinity, block_tokens, hrw_blocks, load_factor, min_bound, queue_threshold, match_threshold, "
             "prefix_holders, balance_new, cache_model, cache_blocks, metrics_interval_s, eject_after, retry_ejected_s")


def test_vllm_options_are_checked_against_pool_options():
    """Bad vllm options validated `ok`, then `serve` died with a raw PoolOptions ValidationError."""
    assert _problem(VLLM_OPTIONS).splitlines() == [
        "policy.yaml:8 backends[0].options.affinity: Input should be a valid boolean, unable to interpret input",
        f"policy.yaml:9 backends[0].options.bogus: unknown key 'bogus' (known: {POOL_KEYS})",
        "policy.yaml:10 backends[0].options.eject_after: Input should be greater than or equal to 1",
    ]
    good = VLLM_OPTIONS.replace("affinity: maybe", "affinity: false").replace("      bogus: 1\n", "")
    loaded = parse_policy(good.replace("eject_after: 0", "eject_after: 2"))
    from backends.vllm.options import PoolOptions

    assert PoolOptions.model_validate(loaded.policy.backends[0].options).eject_after == 2


def test_fake_and_replay_options_are_checked(tmp_path):
    text = GOOD.replace("    quality: 0.9\n",
                        "    quality: 0.9\n    options: {first_token_delay_s: -1, token_delay: 0.1}\n")
    assert _problem(text).splitlines() == [
        "policy.yaml:7 backends[0].options.first_token_delay_s: Input should be greater than or equal to 0",
        "policy.yaml:7 backends[0].options.token_delay: unknown key 'token_delay' "
        "(known: first_token_delay_s, token_delay_s, embedding_dimensions)",
    ]
    assert parse_policy(text.replace("-1, token_delay:", "0.1, token_delay_s:")).policy.backends[0].options == {
        "first_token_delay_s": 0.1, "token_delay_s": 0.1}
    (tmp_path / "bench.csv").write_text(ROUTELLM_CSV)
    text = GOOD.replace("kind: fake\n    model: big-model",
                        "kind: replay\n    model: big-model\n    data: [bench.csv]\n    options: {speed: 2}")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="policy.yaml", base_dir=tmp_path)
    assert str(info.value) == "policy.yaml:7 backends[0].options.speed: unknown key 'speed' (a replay backend takes " \
                              "no options)"


def test_hosted_options_pass_through_unchecked():
    text = GOOD.replace("kind: fake\n    model: big-model",
                        "kind: hosted\n    model: openai/gpt-4o\n    options: {drop_params: true, anything: 1}")
    assert parse_policy(text).policy.backends[0].options == {"drop_params": True, "anything": 1}


def test_an_unquoted_variable_in_a_flow_mapping_says_to_quote_it(monkeypatch):
    # YAML reads the braces of ${KEY} inside {...} as its own; the message said only
    # "expected ',' or '}', but got '{'".
    monkeypatch.setenv("MR_TEST_KEY", "sk-test")
    text = GOOD + "  - {name: flow, backends: [big], description: ${MR_TEST_KEY}}\n"
    assert _problem(text) == ("policy.yaml:14: invalid YAML: expected ',' or '}', but got '{' (a ${VAR} inside {...} "
                              'or [...] must be quoted: "${VAR}")')
    quoted = GOOD + '  - {name: flow, backends: [big], description: "${MR_TEST_KEY}"}\n'
    assert parse_policy(quoted).policy.routes[1].description == "sk-test"


def test_a_hosted_model_litellm_has_no_provider_for_is_an_error_at_its_line():
    # It validated 'ok'; every call then failed with litellm's "LLM Provider NOT provided",
    # answered to the client as its own 400 invalid_request_error, with no fallback.
    text = GOOD.replace("kind: fake\n    model: big-model", "kind: hosted\n    model: not-a-provider-model")
    assert _problem(text) == ("policy.yaml:5 backends[0].model: litellm knows no provider for model "
                              "'not-a-provider-model': write it as provider/model, e.g. openai/gpt-4o-mini or "
                              "anthropic/claude-3-5-haiku-latest")


@pytest.mark.parametrize("backend", [
    "model: openai/gpt-4o-mini",
    "model: gpt-4o-mini",  # a model name litellm knows the provider of
    # models the price map does not know validate once the policy prices them
    "model: my-model\n    options: {custom_llm_provider: openai}\n    pricing: {input_per_1m: 1, output_per_1m: 2}",
    "model: hosted_vllm/llama\n    api_base: http://vllm-0:8000/v1\n    pricing: {input_per_1m: 0, output_per_1m: 0}",
])
def test_hosted_models_litellm_can_place_validate(backend):
    text = GOOD.replace("kind: fake\n    model: big-model", f"kind: hosted\n    {backend}")
    assert parse_policy(text).policy.backends[0].kind == "hosted"


@pytest.mark.parametrize("backend", [
    "model: openai/no-such-model-xyz",
    "model: hosted_vllm/llama\n    api_base: http://vllm-0:8000/v1",
])
def test_an_unpriced_hosted_model_is_an_error_at_its_line(backend):
    # It validated 'ok' and was priced at zero: the cheapest candidate of every route it was in.
    text = GOOD.replace("kind: fake\n    model: big-model", f"kind: hosted\n    {backend}")
    problem = _problem(text)
    assert problem.startswith("policy.yaml:5 backends[0].model: litellm's bundled price map has no price for "), problem
    assert "give the backend pricing: {input_per_1m: X, output_per_1m: Y}" in problem


def test_missing_replay_data_is_an_error_at_its_line(tmp_path, monkeypatch):
    """A replay backend whose data file was missing validated `ok`; `serve` then died with a
    DataFormatError traceback. Relative paths resolve from the policy file's folder."""
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "bench.csv").write_text(ROUTELLM_CSV)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "more.csv").write_text(ROUTELLM_CSV)
    policy = folder / "policy.yaml"
    policy.write_text(GOOD.replace("kind: fake\n    model: big-model", f"""kind: replay
    model: big-model
    data:
      - bench.csv
      - ../data
      - missing.csv
      - {tmp_path}/nope.csv"""))
    with pytest.raises(PolicyError) as info:
        load_policy(policy)
    assert info.value.lines() == [
        f"{policy}:9 backends[0].data[2]: file not found: {folder}/missing.csv",
        f"{policy}:10 backends[0].data[3]: file not found: {tmp_path}/nope.csv",
    ]
    # Without a file (parse_policy, no base_dir) they resolve from the working directory.
    monkeypatch.chdir(folder)
    text = GOOD.replace("kind: fake\n    model: big-model", "kind: replay\n    model: big-model\n    data: [bench.csv]")
    assert parse_policy(text).policy.backends[0].data[0].name == "bench.csv"
    missing = _problem(text.replace("[bench.csv]", "[nope.csv]"))
    assert missing == "policy.yaml:6 backends[0].data[0]: file not found: nope.csv"


def test_replay_data_of_no_known_format_is_an_error_at_its_line(tmp_path):
    """A replay data file that exists but that the backend cannot read (or an empty folder)
    validated `ok`, then `serve` died with a DataFormatError traceback."""
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "good.csv").write_text(ROUTELLM_CSV)
    text = GOOD.replace("kind: fake\n    model: big-model",
                        "kind: replay\n    model: big-model\n    data: [good.csv, bad.csv, empty]")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="policy.yaml", base_dir=tmp_path)
    assert info.value.lines() == [
        f"policy.yaml:6 backends[0].data[1]: {tmp_path}/bad.csv: no known format: not JSON, and no 'prompt' CSV column "
        "(first columns: 'a', 'b')",
        f"policy.yaml:6 backends[0].data[2]: {tmp_path}/empty: no outcome data files in the folder",
    ]


@pytest.mark.parametrize("window, problem", [
    ("1e9", "Input should be less than or equal to 10000"),
    ("1.5e0", "Input should be a valid integer, got a number with a fractional part"),
    ("ten", "Input should be a valid integer, unable to parse string as an integer"),
])
def test_whole_numbers_in_exponent_form_read_as_numbers(window, problem):
    """PyYAML reads `1e9` as a string; `window: 1e9` said "unable to parse string as an
    integer" where the problem is the bound. Whole values in exponent form now pass."""
    bar = "backends: [big, small]\n    quality_bar: {route_target: 0.9, window: %s}"
    assert _problem(GOOD.replace("backends: [big, small]", bar % window)) \
        == f"policy.yaml:14 routes[0].quality_bar.window: {problem}"
    policy = parse_policy(GOOD.replace("backends: [big, small]", bar % "1e3"), source="policy.yaml")
    assert policy.policy.routes[0].quality_bar.window == 1000


@pytest.mark.parametrize("key, kind_words", [
    ("endpoints: [http://vllm-0:8000/v1]", "'endpoints' applies to vllm backends only; this backend is kind 'fake'"),
    ("api_base: https://example.com/v1", "'api_base' applies to hosted backends only; this backend is kind 'fake'"),
    ("api_key: sk-test", "'api_key' applies to hosted and vllm backends only"),
    ("data: [rows.csv]", "'data' applies to replay backends only"),
])
def test_a_key_the_backends_kind_ignores_is_an_error(key, kind_words):
    """A fake backend with `endpoints`, or a hosted one with `data`, validated and the key was
    ignored in silence (a fresh-user pass: the user believed the backend used it)."""
    msg = _problem(GOOD.replace("    quality: 0.7\n", f"    quality: 0.7\n    {key}\n"))
    assert msg.startswith("policy.yaml:7 backends[1]: ") and kind_words in msg, msg


def test_huge_numbers_are_an_error_not_a_traceback():
    text = GOOD.replace("    quality: 0.7\n", "    quality: 0.7\n    context_tokens: 99999999999999999999999\n")
    assert _problem(text) == "policy.yaml:11 backends[1].context_tokens: number out of range (at most 2**63 - 1)"


def test_endpoint_control_characters_and_duplicates():
    for endpoints, problem in ((r'["http://h\u0000/v1"]', "control characters"),
                               ('["http://a:1/v1", "http://a:1/v1/"]', "listed twice")):
        text = GOOD.replace("kind: fake\n    model: big-model",
                            f"kind: vllm\n    model: big-model\n    endpoints: {endpoints}")
        assert problem in _problem(text)
    for options, problem in (("{eject_after: true}", "options.eject_after: must be a number, not true/false"),
                             ("{retry_ejected_s: .inf}", "options.retry_ejected_s: Input should be a finite number")):
        text = GOOD.replace("kind: fake\n    model: big-model",
                            f"kind: vllm\n    model: big-model\n    endpoints: ['http://a:1/v1']\n    options: {options}")
        assert problem in _problem(text)


def test_options_from_environment_variables_are_numbers(monkeypatch):
    """``${VAR:-5}`` substitution yields strings; numeric options must still accept them."""
    monkeypatch.setenv("MR_TEST_INTERVAL", "2.5")
    text = GOOD.replace("kind: fake\n    model: big-model",
                        "kind: vllm\n    model: big-model\n    endpoints: ['http://a:1/v1']\n"
                        "    options: {metrics_interval_s: '${MR_TEST_INTERVAL}', eject_after: '${MR_TEST_EJECT:-4}'}")
    options = parse_policy(text).policy.backends[0].options
    from backends.vllm.options import PoolOptions

    parsed = PoolOptions.model_validate(options)
    assert (parsed.metrics_interval_s, parsed.eject_after) == (2.5, 4)


def test_backend_listed_twice_in_a_route():
    text = GOOD.replace("backends: [big, small]", "backends:\n      - big\n      - small\n      - big")
    assert _problem(text) == "policy.yaml:16 routes[0].backends[2]: backend 'big' is listed twice"


def test_cli_validate_ends_every_problem_with_a_newline(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("backends: [big, small]", "backends: [big, nope, big]"))
    result = CliRunner().invoke(app, ["policy", "validate", str(bad)])
    assert result.exit_code == 1
    assert result.stderr == (f"{bad}:13 routes[0].backends[1]: unknown backend 'nope' (known: big, small)\n"
                             f"{bad}:13 routes[0].backends[2]: backend 'big' is listed twice\n")


def test_one_problem_is_one_line():
    from router.policy import PolicyProblem

    error = PolicyError("p.yaml", [PolicyProblem(3, "a", "first\nsecond"), PolicyProblem(0, "", "x")])
    assert error.lines() == ["p.yaml:3 a: first second", "p.yaml: x"]


def test_serve_refuses_bad_options_with_the_same_lines(tmp_path):
    """`mixroute serve` exits like `policy validate` (status 1, file:line lines), no traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(VLLM_OPTIONS)
    result = CliRunner().invoke(app, ["serve", "--policy", str(bad)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    expected = [line.replace("policy.yaml", str(bad), 1) for line in _problem(VLLM_OPTIONS).splitlines()]
    assert len(expected) == 3 and result.stderr.splitlines() == expected
    assert "Traceback" not in result.output


RULES_BASE = """version: 1
backends:
  - {name: big, kind: fake, model: gpt-4o, quality: 0.88, tags: [hosted]}
routes:
  - {name: auto, backends: [big]}
rules:
"""


@pytest.mark.parametrize("rules, line, words", [
    ("  - {name: r, when_signal: {injection: 2}, block: true}\n", 7, "between 0 and 1"),
    ("  - {name: r, when_signal: {pii: -1}, block: true}\n", 7, "between 0 and 1"),
    ("  - {name: r, when_header: 'bad header', block: true}\n", 7, "not an HTTP header name"),
    ("  - {name: r, require_tags: [gpu]}\n", 7, "no backend has the tag(s) 'gpu'"),
    ("  - {name: r, max_cost_usd: 1}\n  - {name: r, block: true}\n", 8, "duplicate rule name 'r'"),
    ("  - {name: r, when_signal: {pii: true}, block: true}\n", 7, "must be a number, not True"),
    ("  - {name: r, when_signal: {injecton: 0.5}, block: true}\n", 7, "did you mean 'injection'"),
    ("  - {name: r, when_signal: {domain: 0.5}, block: true}\n", 7, "not a number signal"),
    ("  - {name: r, when_signal_below: {scan_coverag: 1}, block: true}\n", 7, "did you mean 'scan_coverage'"),
    ("  - {name: r, when_signal_below: {scan_coverage: 1.5}, block: true}\n", 7, "between 0 and 1"),
    ("  - {name: r, when_signal_below: {scan_coverage: false}, block: true}\n", 7, "must be a number, not False"),
    ("  - {name: r, when_signal_below: {scan_coverage: 0}, block: true}\n", 7, "never holds"),
    ("  - {name: r, when_signal: {pii: 0.5}, when_signal_below: {pii: 0.5}, block: true}\n", 7, "would never fire"),
    ("  - {name: r, when_signal: {PII: 0.5}, block: true}\n", 7, "unknown signal 'PII': did you mean 'pii'"),
    ("  - {name: r, when_signal: {toxicity: 0.5}, block: true}\n", 7, "unknown signal 'toxicity': (number signals: pii"),
])
def test_rules_that_could_never_work_are_refused_with_their_line(rules, line, words):
    problem = _problem(RULES_BASE + rules)
    assert f"policy.yaml:{line} rules[" in problem and words in problem, problem


def test_every_unknown_key_and_bad_signal_of_a_rule_gets_its_own_line():
    """As each bad endpoints entry does; an unknown signal used to hide the ones after it."""
    assert _problem(RULES_BASE + "  - {name: x, when_foo: 1, bar: 2}\n").splitlines() == [
        "policy.yaml:7 rules[0].when_foo: unknown key 'when_foo'", "policy.yaml:7 rules[0].bar: unknown key 'bar'"]
    lines = _problem(RULES_BASE + "  - name: x\n    block: true\n    when_signal:\n      toxicity: 0.5\n"
                                  "      injecton: 0.5\n      pii: 2\n").splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("policy.yaml:10 rules[0].when_signal.toxicity: unknown signal 'toxicity'")
    assert lines[1].startswith("policy.yaml:11 rules[0].when_signal.injecton: unknown signal 'injecton': did you mean")
    assert lines[2] == ("policy.yaml:12 rules[0].when_signal.pii: the threshold must be between 0 and 1 "
                        "(signals are probabilities), not 2.0")


def test_require_tags_must_be_reachable_together_and_within_the_rule_routes():
    base = """version: 1
backends:
  - {name: a, kind: fake, model: a, tags: [x]}
  - {name: b, kind: fake, model: b, tags: [y]}
  - {name: c, kind: fake, model: c}
routes:
  - {name: auto, backends: [a, b]}
  - {name: only-c, backends: [c]}
rules:
"""
    assert "has all of the tags ['x', 'y']" in _problem(base + "  - {name: both, require_tags: [x, y]}\n")
    assert "of routes only-c has all of the tags ['x']" in _problem(
        base + "  - {name: scoped, routes: [only-c], require_tags: [x]}\n")
    parse_policy(base + "  - {name: fine, routes: [auto], require_tags: [x]}\n")


def test_sensible_rules_still_load(monkeypatch):
    import router.policy.signals as signals

    # A head trained and added under adapters/ is a signal too (its folder names it).
    monkeypatch.setattr(signals, "number_signals", lambda: (*signals.NUMBER_SIGNALS, "my_custom_head"))
    parse_policy(RULES_BASE + "  - {name: a, when_signal: {injection: 0.8}, when_header: x-priority, block: true}\n"
                 "  - {name: b, require_tags: [hosted], when_signal: {pii: 0}}\n"
                 "  - {name: c, when_signal: {my_custom_head: 0.5, domain_confidence: 1}, block: true}\n")


def test_the_shipped_heads_are_the_known_signals():
    from router.policy.signals import number_signals

    assert number_signals() == ("pii", "injection", "difficulty", "domain_confidence", "scan_coverage")


def test_lookups_follow_a_copy_with_other_backends_or_routes():
    """Policy.backend/route are indexed once per policy; a model_copy with new lists (how
    calibration swaps a route's bar and the loader resolves data paths) finds its own."""
    loaded = parse_policy(GOOD)
    policy = loaded.policy
    assert policy.route("auto") is policy.routes[0] and policy.backend("big") is policy.backends[0]
    bar = policy.routes[0].quality_bar.model_copy(update={"target": 0.5})
    copy = policy.model_copy(update={"routes": [policy.routes[0].model_copy(update={"quality_bar": bar})]})
    assert copy.route("auto").quality_bar.target == 0.5 and policy.route("auto").quality_bar.target != 0.5
    renamed = policy.model_copy(update={"backends": [b.model_copy(update={"name": b.name + "2"}) for b in policy.backends]})
    assert renamed.backend("big") is None and renamed.backend("big2").model == "big-model"
    assert policy.backend("big") is not None and copy == copy.model_copy()


def test_fake_delay_options_refuse_booleans():
    text = ("version: 1\nbackends:\n  - {name: s, kind: fake, model: m-slow, options: {first_token_delay_s: true}}\n"
            "routes:\n  - {name: auto, backends: [s]}\n")
    assert _problem(text) == "policy.yaml:3 backends[0].options.first_token_delay_s: must be a number, not True"
    assert parse_policy(text.replace("true", "0.1")).policy.backends[0].options == {"first_token_delay_s": 0.1}


def test_a_policy_path_that_is_no_regular_file_or_too_large_is_one_problem(tmp_path):
    from router.policy import PolicyError, load_policy
    from router.policy.loader import MAX_POLICY_BYTES

    endless = tmp_path / "endless.yaml"
    endless.symlink_to("/dev/zero")  # read whole, it never ends
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_POLICY_BYTES + 1))
    for path, words in ((endless, "not a regular file"), (tmp_path, "not a regular file"), (big, "larger than 8 MiB")):
        with pytest.raises(PolicyError) as info:
            load_policy(path)
        (line,) = info.value.lines()
        assert line.startswith(f"{path}: cannot read file: ") and words in line, line


def test_route_to_outside_its_own_allow_list_is_refused():
    """From a fresh-user pass: {route_to: big, allow_backends: [small]} validated, and every
    request it matched then failed with 503 no_candidate."""
    rules = "rules:\n  - {name: contra, when_header: x-mixroute-a, route_to: big, allow_backends: [small]}\n"
    problem = _problem(GOOD + rules)
    assert problem.startswith("policy.yaml:15 rules[0]: ") and "'route_to: big' is not in its own 'allow_backends'" in problem
    parse_policy(GOOD + rules.replace("[small]", "[small, big]"))


def test_gpu_pricing_and_token_prices_together_are_refused():
    """gpu_usd_per_hour replaces the token prices (backends.pricing.gpu_pricing): both given, the
    token prices were dropped in silence."""
    both = GOOD.replace("    quality: 0.7\n", "    quality: 0.7\n    pricing: {input_per_1m: 1, gpu_usd_per_hour: 2, "
                        "output_tokens_per_s: 1000}\n")
    assert "not both: the GPU pricing replaces the token prices" in _problem(both)


def test_validate_notes_an_unpriced_vllm_pool(tmp_path):
    """From a fresh-user pass: a vllm pool without pricing is costed at $0 and wins every
    route it clears the bar on; validate now says so (a note: free pools are legitimate)."""
    policy = tmp_path / "p.yaml"
    text = GOOD.replace("backends:\n", "backends:\n  - {name: pool, kind: vllm, model: m, endpoints: [http://v:8000/v1]}\n", 1)
    policy.write_text(text)
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)])
    assert result.exit_code == 0 and ": ok (" in result.stdout
    assert "note: backend 'pool' (vllm) has no pricing: what is unpriced is costed at $0" in result.stderr
    # cache prices alone, or one token price, leave tokens at $0 (second break-it pass)
    for block in ("{}", "{cache_write_input_per_1m: 1}", "{input_per_1m: 1}", "{output_per_1m: 1}"):
        policy.write_text(text.replace("endpoints: [http://v:8000/v1]}", f"endpoints: [http://v:8000/v1], pricing: {block}}}"))
        note = CliRunner().invoke(app, ["policy", "validate", str(policy)]).stderr
        assert "(vllm) has no price for every token: what is unpriced is costed at $0" in note
        assert "'{input_per_1m: 0, output_per_1m: 0}' to say it is free" in note
    policy.write_text(text.replace("endpoints: [http://v:8000/v1]}",
                                   "endpoints: [http://v:8000/v1], pricing: {input_per_1m: 0, output_per_1m: 0}}"))
    assert CliRunner().invoke(app, ["policy", "validate", str(policy)]).stderr == ""


def test_a_route_to_shadowed_by_an_earlier_rule_with_the_same_conditions_is_refused():
    """From a fresh-user pass: two rules with one condition, `route_to: big` then `route_to:
    small`, validated; the first matching route_to wins, so the second never acted."""
    rules = ("rules:\n  - {name: one, when_header: x-mixroute-a, route_to: big}\n"
             "  - {name: two, when_header: X-Mixroute-A, route_to: small}\n")
    problem = _problem(GOOD + rules)
    assert problem == ("policy.yaml:16 rules[1].route_to: never takes effect: rule 'one' has the same conditions "
                       "and routes to 'big' first (the first matching route_to wins)")
    parse_policy(GOOD + rules.replace("X-Mixroute-A", "x-mixroute-b"))  # other conditions: fine


def test_every_bad_endpoint_of_a_list_gets_its_own_line():
    """From a fresh-user pass: `endpoints: ["not a url", "ftp://x"]` reported only the first."""
    text = GOOD.replace("kind: fake\n    model: big-model",
                        "kind: vllm\n    model: big-model\n    endpoints: ['not a url', 'ftp://x', 'http://ok:8000/v1']")
    assert _problem(text).splitlines() == [
        "policy.yaml:6 backends[0].endpoints[0]: endpoint 'not a url' must start with http:// or https://",
        "policy.yaml:6 backends[0].endpoints[1]: endpoint 'ftp://x' must start with http:// or https://"]


@pytest.mark.parametrize(("text", "line", "hint"), [
    # a key one column off from its siblings
    (GOOD.replace("    quality: 0.7", "   quality: 0.7"), 10, "keys of one mapping start in the same column"),
    # a key indented deeper than the one before it
    (GOOD.replace("    model: small-model", "      model: small-model"), 9, "indented deeper than the key before it"),
    (GOOD.replace("  - name: big", "\t- name: big"), 3, "a tab: YAML indents with spaces only"),
    (GOOD.replace("[big, small]", "[big, small"), 14, "the '[' opened at line 13 is not closed"),
    (GOOD.replace("backends:\n  - name: big", "backends: {name: big\n  - name: big", 1), 3,
     "the '{' opened at line 2 is not closed"),
    (GOOD.replace("model: big-model", 'model: "big-model'), 14, "the quote opened at line 5 is not closed"),
    (GOOD.replace("routes:\n", "routes: - name: auto\n"), 11, "a list starts on the line below its key"),
])
def test_common_yaml_mistakes_are_explained_at_their_line(text, line, hint):
    message = _problem(text)
    assert message.startswith(f"policy.yaml:{line}: invalid YAML: ") and hint in message, message


TAGGED = GOOD.replace("    quality: 0.7\n", "    quality: 0.7\n    tags: [self_hosted]\n") + """  - name: best
    backends: [big]
"""


@pytest.mark.parametrize(("rules", "line", "words"), [
    # allow_backends and require_tags of one rule that no backend satisfies together
    ("  - {name: c, tenants: [beta], allow_backends: [big], require_tags: [self_hosted]}\n", 18,
     "its filters leave no backend of any route"),
    # route_to a backend without the rule's own required tag
    ("  - {name: d, tenants: [gamma], route_to: big, require_tags: [self_hosted]}\n", 18,
     "leave no backend of 'route_to: big'"),
    # two rules that always match together, with disjoint allow lists
    ("  - {name: a, tenants: [acme], allow_backends: [big]}\n  - {name: b, tenants: [acme], allow_backends: [small]}\n",
     19, "its filters with rule(s) a (same conditions) leave no backend of any route"),
    # an allow list outside the only route the rule applies to
    ("  - {name: e, routes: [best], allow_backends: [small]}\n", 18, "leave no backend of routes best"),
])
def test_rules_that_together_leave_no_backend_are_refused(rules, line, words):
    """From a break-it pass: each validated, and every request it matched got no_candidate."""
    problem = _problem(TAGGED + "rules:\n" + rules)
    assert problem.startswith(f"policy.yaml:{line} rules[") and words in problem, problem


@pytest.mark.parametrize("rules", [
    "  - {name: c, tenants: [beta], allow_backends: [big, small], require_tags: [self_hosted]}\n",
    "  - {name: a, tenants: [acme], allow_backends: [big, small]}\n  - {name: b, tenants: [acme], allow_backends: [small]}\n",
    # different conditions: each leaves a backend on its own
    "  - {name: a, tenants: [acme], allow_backends: [big]}\n  - {name: b, tenants: [beta], allow_backends: [small]}\n",
    # another rule's route_to can bring a tagged backend into route best
    "  - {name: e, routes: [best], require_tags: [self_hosted]}\n  - {name: f, when_header: x-local, route_to: small}\n",
    "  - {name: g, routes: [best], allow_backends: [big], max_cost_usd: 1}\n",
])
def test_rules_that_leave_a_backend_are_kept(rules):
    parse_policy(TAGGED + "rules:\n" + rules)


def test_validate_notes_backends_the_quality_head_cannot_predict_for(tmp_path):
    """From a break-it pass: `quality_model: gpt-17-turbo` (a typo) validated without a word,
    and every prompt then got the unknown prior 0.5 for that backend, so it lost every route."""
    from router.classify.labels import shipped_quality_labels

    if not shipped_quality_labels():
        pytest.skip("no shipped quality head (adapters/quality/config.json)")
    policy = tmp_path / "p.yaml"
    policy.write_text("""version: 1
backends:
  - {name: typo, kind: fake, model: gpt-4o, quality_model: gpt-17-turbo}
  - {name: unknown, kind: fake, model: mystery-8b}
  - {name: known, kind: fake, model: openai/gpt-4-1106-preview}
  - {name: prior, kind: fake, model: other-model, quality: 0.7}
  - {name: unrouted, kind: fake, model: nobody-knows}
routes:
  - {name: auto, backends: [typo, unknown, known, prior]}
""")
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)])
    assert result.exit_code == 0
    notes = [line for line in result.output.splitlines() if ": note: " in line]
    assert len(notes) == 2, notes
    assert "backend 'typo': quality_model 'gpt-17-turbo' is not a model the quality head knows" in notes[0]
    assert "gpt-4-1106-preview" in notes[0]  # the known labels are listed
    assert "backend 'unknown': the quality head does not know model 'mystery-8b'" in notes[1]


def test_an_unknown_key_whose_value_is_an_alias_is_reported_at_the_key():
    """From a break-it pass: `extra: *b` on line 16 was reported at line 2, where `&b` is."""
    text = "base: &b {kind: fake, model: m}\n" + GOOD + "extra: *b\n"
    problem = _problem(text)
    assert "policy.yaml:1 base: unknown key 'base'" in problem and "policy.yaml:15 extra: unknown key 'extra'" in problem, problem
