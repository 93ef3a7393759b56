"""The loaders on the real shared outcome data (skipped when it is absent)."""

from __future__ import annotations

import csv
import sys

import pytest

from backends.data import DataFormatError, detect, load

ROUTERBENCH_MODELS = {
    "gpt-4-1106-preview", "gpt-3.5-turbo-1106", "claude-v2", "claude-v1", "claude-instant-v1",
    "meta/llama-2-70b-chat", "mistralai/mixtral-8x7b-chat", "mistralai/mistral-7b-chat",
    "zero-one-ai/Yi-34B-Chat", "WizardLM/WizardLM-13B-V1.2", "meta/code-llama-instruct-34b-chat",
}
ROUTELLM_MODELS = ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"]


def _complete(ds) -> None:
    for r in ds.rows:
        assert set(r.scores) == set(ds.models)
        assert all(0.0 <= s <= 1.0 for s in r.scores.values())
        assert r.prompt.strip()


def test_routerbench_winogrande(data_dir):
    path = data_dir / "routerbench" / "winograde_train.csv"
    assert detect(path) == "routerbench_csv"
    ds = load(path)
    assert (ds.name, ds.format, len(ds.rows), ds.dropped) == ("winograde_train", "routerbench_csv", 887, {})
    assert set(ds.models) == ROUTERBENCH_MODELS
    _complete(ds)
    first = ds.rows[0]
    assert first.prompt.startswith("Please answer with the letter of the correct answer.")
    assert not first.prompt.startswith("[")  # the Python-literal list is parsed
    assert first.responses["gpt-4-1106-preview"] == "A"
    assert first.costs["gpt-4-1106-preview"] == pytest.approx(0.00354)
    assert first.scores["WizardLM/WizardLM-13B-V1.2"] == 1.0
    assert first.meta["sample_id"] == "winogrande.dev.949"
    assert ds.has_costs and ds.strongest() == "gpt-4-1106-preview"


def test_routerbench_arc_drops_empty_scores(data_dir):
    ds = load(data_dir / "routerbench" / "arc_challenge_train.csv")
    # README: 1,019 rows after dropping the rows with empty scores.
    assert len(ds.rows) == 1019 and ds.dropped == {"missing_score": 20}
    _complete(ds)
    assert any("\n" in r.prompt for r in ds.rows)  # multi-part prompt lists are joined


def test_routerbench_rows_match_the_csv(data_dir):
    path = data_dir / "routerbench" / "mbpp_train.csv"
    csv.field_size_limit(sys.maxsize)
    with path.open(newline="") as fh:
        raw = [next(csv.DictReader(fh)) for _ in range(1)]
    row = load(path).rows[0]
    for m in ROUTERBENCH_MODELS:
        assert row.scores[m] == float(raw[0][m])
        assert row.costs[m] == float(raw[0][f"{m}|total_cost"])
        assert row.responses[m] and not row.responses[m].startswith("['")


def test_routellm_mmlu_folder_drops_contaminated(data_dir):
    folder = data_dir / "routellm" / "mmlu"
    assert detect(folder) == "folder"
    assert detect(folder / "mmlu_anatomy.csv") == "routellm_csv"
    ds = load(folder)
    assert ds.name == "mmlu" and ds.format == "routellm_csv" and ds.models == ROUTELLM_MODELS
    assert len(ds.rows) == 6996 - 2 and ds.dropped == {"contaminated": 2}
    sources = {r.source for r in ds.rows}
    assert len(sources) == 57 and "mmlu_anatomy" in sources
    assert all(r.responses[m] is None and r.costs[m] is None for r in ds.rows[:50] for m in ds.models)
    _complete(ds)
    assert not ds.has_costs


def test_routellm_gsm8k_responses(data_dir):
    ds = load(data_dir / "routellm" / "gsm8k" / "gsm8k_responses.csv")
    assert ds.name == "gsm8k_responses" and len(ds.rows) == 665 - 5 and ds.dropped == {"contaminated": 5}
    assert all(r.responses["gpt-4-1106-preview"] for r in ds.rows)
    assert ds.mean_score("gpt-4-1106-preview") > ds.mean_score("mistralai/Mixtral-8x7B-Instruct-v0.1")


def test_routerdc_file_and_folder(data_dir):
    path = data_dir / "routerdc" / "humaneval_train.json"
    assert detect(path) == "routerdc_json"
    ds = load(path)
    assert ds.name == "humaneval_train" and len(ds.rows) == 115 and len(ds.models) == 7
    _complete(ds)
    assert all(r.responses[m] is None for r in ds.rows for m in ds.models)
    folder = load(data_dir / "routerdc")
    assert folder.name == "routerdc" and len(folder.rows) == 820 + 1663 + 2000 + 1000 + 115 + 2000
    assert "cluster_id" in load(data_dir / "routerdc" / "arc_challenge_train.json").rows[0].meta


def test_mt_bench_example(data_dir):
    folder = data_dir / "formats" / "mt_bench_example"
    assert detect(folder) == "mt_bench"
    ds = load(folder)
    assert ds.models == ["gpt-4-1106-preview", "mistralai/Mixtral-8x7B-Instruct-v0.1"]
    by_id = {r.meta["question_id"]: r for r in ds.rows}
    assert by_id[9001].prompt.startswith("A train leaves at 3pm")
    assert by_id[9001].scores == {"gpt-4-1106-preview": pytest.approx(0.95),
                                  "mistralai/Mixtral-8x7B-Instruct-v0.1": pytest.approx(0.55)}
    assert by_id[9002].scores["mistralai/Mixtral-8x7B-Instruct-v0.1"] == pytest.approx(0.85)


@pytest.mark.parametrize(("relpath", "reason"), [
    ("routellm", "no outcome data files"),
    ("routellm/LICENSE", "no 'prompt' CSV column"),
    ("routellm/mmlu/contaminated_prompts.jsonl", "contaminated-prompt list"),
    ("formats/mt_bench_example/question.jsonl", "pass the folder"),
    ("routerbench/missing.csv", "no such file"),
])
def test_real_paths_that_are_not_datasets(data_dir, relpath, reason):
    with pytest.raises(DataFormatError, match=reason) as err:
        load(data_dir / relpath)
    assert err.value.path.endswith(relpath.split("/")[-1])
