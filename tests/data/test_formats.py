"""Format detection and parsing on tiny synthetic files (no shared data needed)."""

from __future__ import annotations

import json

import pytest

from backends.data import DataFormatError, detect, load

GPT, MIX = "gpt-4-1106-preview", "mistralai/Mixtral-8x7B-Instruct-v0.1"


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_routellm_csv_detected_from_content_not_extension(tmp_path):
    path = _write(tmp_path / "mmlu_tiny.txt",
                  f'prompt,{MIX},{GPT}\n"Q1\nA. x\nAnswer:",True,False\nQ2,false,TRUE\n')
    assert detect(path) == "routellm_csv"
    ds = load(path)
    assert ds.name == "mmlu_tiny" and ds.models == [MIX, GPT]
    assert [r.scores for r in ds.rows] == [{MIX: 1.0, GPT: 0.0}, {MIX: 0.0, GPT: 1.0}]
    assert ds.rows[0].prompt == "Q1\nA. x\nAnswer:" and ds.rows[0].responses == {MIX: None, GPT: None}


def test_routellm_responses_and_contaminated(tmp_path):
    _write(tmp_path / "contaminated_prompts.jsonl",
           json.dumps({"train_prompt": "x", "eval_prompt": "Dirty   prompt"}) + "\n")
    path = _write(tmp_path / "gsm8k_responses.csv",
                  f"prompt,{MIX},{GPT},{MIX}_response,{GPT}_response\n"
                  "Clean,True,True,m says 4,g says 4\n"
                  '"Dirty\nprompt",False,True,m,g\n'
                  "Empty score,,True,m,g\n")
    ds = load(path)
    assert [r.prompt for r in ds.rows] == ["Clean"]
    assert ds.rows[0].responses == {MIX: "m says 4", GPT: "g says 4"}
    assert ds.dropped == {"contaminated": 1, "missing_score": 1}


def test_routellm_non_boolean_is_a_clear_error(tmp_path):
    path = _write(tmp_path / "x.csv", "prompt,a,b\nQ,True,maybe\n")
    with pytest.raises(DataFormatError, match=r"x\.csv: line 2: column 'b' holds 'maybe', not a boolean"):
        load(path)


def test_routerbench_csv(tmp_path):
    header = ",sample_id,prompt,eval_name,m1,m2,m1|model_response,m2|model_response,m1|total_cost,m2|total_cost," \
             "oracle_model_to_route_to\n"
    rows = [
        ["7", "s.1", repr(["Part one", "Part two"]), "ev", "1.0", "0.0", repr(["Yes\n"]), repr(["No"]), "0.01", "1e-4",
         "m1"],
        ["8", "s.2", repr(["Other"]), "ev", "", "1.0", "['a']", "['b']", "0.01", "0.02", "m2"],
        ["9", "s.3", repr(["It's \"quoted\""]), "ev", "0.5", "1", "", "plain text", "", "0.02", "m2"],
    ]
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path = _write(tmp_path / "bench.data", header + buf.getvalue())
    assert detect(path) == "routerbench_csv"
    ds = load(path)
    assert ds.models == ["m1", "m2"] and ds.dropped == {"missing_score": 1}
    a, b = ds.rows
    assert a.prompt == "Part one\nPart two" and a.responses == {"m1": "Yes\n", "m2": "No"}
    assert a.costs == {"m1": 0.01, "m2": 1e-4} and a.meta == {"sample_id": "s.1", "eval_name": "ev",
                                                             "oracle_model_to_route_to": "m1"}
    assert b.prompt == 'It\'s "quoted"' and b.responses == {"m1": None, "m2": "plain text"}
    assert b.costs == {"m1": None, "m2": 0.02} and b.scores == {"m1": 0.5, "m2": 1.0}
    assert ds.mean_cost("m1") == 0.01 and ds.has_costs


def test_routerdc_json(tmp_path):
    items = [{"question": "Q1", "scores": {"a": 0.25, "b": 1}, "cluster_id": 3},
             {"question": "Q2", "scores": {"a": None, "b": 1.0}},
             {"question": "Q3", "scores": {"a": 0, "b": 0.5}}]
    path = _write(tmp_path / "dc.bin", "\n  " + json.dumps(items))
    assert detect(path) == "routerdc_json"
    ds = load(path)
    assert ds.models == ["a", "b"] and [r.prompt for r in ds.rows] == ["Q1", "Q3"]
    assert ds.rows[0].scores == {"a": 0.25, "b": 1.0} and ds.rows[0].meta == {"cluster_id": 3}
    assert ds.dropped == {"missing_score": 1} and ds.strongest() == "b"


def test_routerdc_bad_element(tmp_path):
    path = _write(tmp_path / "dc.json", json.dumps([{"question": "Q", "scores": {"a": 1}}, {"question": 5, "scores": {}}]))
    with pytest.raises(DataFormatError, match="element 1: needs a string 'question'"):
        load(path)


def _mt_bench(folder, judgements, contaminated=None):
    folder.mkdir()
    qs = [{"question_id": 1, "category": "math", "turns": ["First  turn one", "turn two"]},
          {"question_id": 2, "category": "writing", "turns": ["Second q", "again"]},
          {"question_id": 3, "category": "writing", "turns": ["Third q", "again"]}]
    _write(folder / "question.jsonl", "\n".join(json.dumps(q) for q in qs) + "\n")
    _write(folder / "judgements.jsonl", "\n".join(
        json.dumps({"question_id": q, "model": m, "judge": ["gpt-4", "single-v1"], "score": s, "turn": t})
        for q, m, t, s in judgements))
    if contaminated:
        _write(folder / "contaminated_prompts.jsonl", json.dumps({"eval_prompt": contaminated}))
    return folder


def test_mt_bench_folder(tmp_path):
    folder = _mt_bench(tmp_path / "mt_bench", [
        (1, "s", 1, 10), (1, "s", 2, 8), (1, "w", 1, 6), (1, "w", 2, -1),  # -1: unparsed judgement
        (2, "s", 1, 9), (2, "w", 1, 3), (2, "w", 2, 5),
        (3, "s", 1, 9),  # no grade for "w": dropped
    ], contaminated="Second q")
    ds = load(folder)
    assert ds.name == "mt_bench" and ds.format == "mt_bench" and ds.models == ["s", "w"]
    assert [r.prompt for r in ds.rows] == ["First  turn one"]
    assert ds.rows[0].scores == {"s": pytest.approx(0.9), "w": pytest.approx(0.6)}
    assert ds.dropped == {"contaminated": 1, "missing_score": 1}


def test_folder_is_one_dataset(tmp_path):
    folder = tmp_path / "bundle"
    folder.mkdir()
    _write(folder / "a.csv", "prompt,x,y\nQa,True,False\n")
    _write(folder / "b.csv", "prompt,y,x\nQb,True,True\n")
    _write(folder / "README.md", "not data")
    _write(folder / ".hidden", "junk")
    ds = load(folder)
    assert ds.name == "bundle" and [(r.prompt, r.source) for r in ds.rows] == [("Qa", "a"), ("Qb", "b")]
    _write(folder / "c.csv", "prompt,x,z\nQc,True,True\n")
    with pytest.raises(DataFormatError, match=r"c\.csv: models .* one model set"):
        load(folder)


@pytest.mark.parametrize(("content", "reason"), [
    ("", "the file is empty"),
    ("   \n", "the file is empty"),
    ('{"a": 1}\n', "JSON lines with keys"),
    ('[{"x": 1}]', "without 'question' and 'scores'"),
    ("id,text\n1,hello\n", "no 'prompt' CSV column"),
    ("prompt\nonly prompts\n", "no model columns"),
])
def test_unknown_formats(tmp_path, content, reason):
    path = _write(tmp_path / "data.csv", content)
    with pytest.raises(DataFormatError, match=reason) as err:
        load(path)
    assert err.value.path == str(path) and str(err.value).startswith(str(path))


def test_binary_file(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b"prompt,a\n\x00\x01")
    with pytest.raises(DataFormatError, match="binary"):
        load(path)


def test_huge_field(tmp_path):
    big = "word " * 100_000  # > csv's default 131,072-character field limit
    path = _write(tmp_path / "big.csv", f'prompt,a\n"{big}",True\n')
    assert load(path).rows[0].prompt == big
