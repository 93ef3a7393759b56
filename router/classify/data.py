"""Training rows for the heads, read from the shared outcome data (``../shared/data``).

A small, self-contained loader for the three layouts described in that folder's README
(RouteLLM CSVs, RouterBench wide CSVs, RouterDC JSON lists). Each prompt becomes one
:class:`Row`; nothing is copied into the repository.

Splits are by prompt text, never by row: :func:`split_of` hashes the normalised prompt,
so a prompt that occurs in two sources lands in the same split and the held-out ``test``
split shares no prompt with ``train``.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: Domain classes of the ``domain`` head. ``chat`` (open-ended chat) has no rows in the
#: shared data, so the head does not predict it yet.
DOMAINS = ("math", "code", "science", "commonsense", "humanities", "social_science", "professional", "general")

_MMLU_GROUPS = {
    "math": "abstract_algebra college_mathematics elementary_mathematics high_school_mathematics "
            "high_school_statistics",
    "science": "anatomy astronomy college_biology college_chemistry college_computer_science college_physics "
               "computer_security conceptual_physics electrical_engineering high_school_biology "
               "high_school_chemistry high_school_computer_science high_school_physics machine_learning virology",
    "humanities": "formal_logic high_school_european_history high_school_us_history high_school_world_history "
                  "logical_fallacies moral_disputes moral_scenarios philosophy prehistory world_religions",
    "social_science": "econometrics high_school_geography high_school_government_and_politics "
                      "high_school_macroeconomics high_school_microeconomics high_school_psychology "
                      "human_sexuality professional_psychology public_relations security_studies sociology "
                      "us_foreign_policy",
    "professional": "professional_law international_law jurisprudence professional_medicine clinical_knowledge "
                    "college_medicine medical_genetics nutrition human_aging professional_accounting "
                    "business_ethics management marketing",
    "general": "global_facts miscellaneous",
}
MMLU_DOMAIN = {s: group for group, subjects in _MMLU_GROUPS.items() for s in subjects.split()}
_TASK_DOMAIN = {"gsm8k": "math", "mbpp": "code", "humaneval": "code", "arc-challenge": "science",
                "arc-easy": "science", "winogrande": "commonsense"}

#: Characters per token used to turn a recorded response into a token count: the usual
#: rule of thumb for English with GPT-style BPE tokenizers (OpenAI's tokenizer guide).
CHARS_PER_TOKEN = 4


@dataclass
class Row:
    """One prompt with its outcomes.

    Attributes:
        text: the prompt as sent to the models.
        source: ``routellm``, ``routerbench`` or ``routerdc``.
        task: ``mmlu:<subject>``, ``gsm8k``, ``mbpp``, ``arc-challenge``, ``cmmlu``...
        scores: model name -> score in [0, 1] (1 = answered correctly; soft in RouterDC
            and for partial mbpp scores).
        response_tokens: approximate completion tokens of each recorded response.
        domain: one of :data:`DOMAINS`, or ``None`` when the source does not say.
        flags: binary labels of the ``pii`` / ``injection`` heads (1.0 / 0.0), where known.
    """

    text: str
    source: str
    task: str
    scores: dict[str, float]
    response_tokens: list[int] = field(default_factory=list)
    domain: str | None = None
    flags: dict[str, float] = field(default_factory=dict)


def split_of(text: str, *, test_pct: int = 10, calib_pct: int = 10) -> str:
    """``test``, ``calib`` or ``train`` for a prompt, from a hash of its normalised text."""
    bucket = int(hashlib.sha1(" ".join(text.split()).lower().encode("utf-8", "replace")).hexdigest()[:8], 16) % 100
    if bucket < test_pct:
        return "test"
    return "calib" if bucket < test_pct + calib_pct else "train"


def approx_tokens(text: str) -> int:
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _bool(v: str) -> float | None:
    v = v.strip().lower()
    if v in ("true", "1", "1.0"):
        return 1.0
    if v in ("false", "0", "0.0"):
        return 0.0
    try:
        return min(1.0, max(0.0, float(v)))
    except ValueError:
        return None


def _contaminated(folder: Path) -> set[str]:
    path = folder / "contaminated_prompts.jsonl"
    if not path.exists():
        return set()
    with path.open(encoding="utf-8") as f:
        return {json.loads(line)["eval_prompt"] for line in f if line.strip()}


def _routellm_csv(path: Path, task: str, drop: set[str]) -> Iterator[Row]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        models = [c for c in reader.fieldnames or [] if c != "prompt" and not c.endswith("_response")]
        for rec in reader:
            if rec["prompt"] in drop:
                continue
            scores = {m: s for m in models if (s := _bool(rec[m])) is not None}
            tokens = [approx_tokens(rec[f"{m}_response"]) for m in models if rec.get(f"{m}_response")]
            subject = task.split(":", 1)[-1]
            domain = MMLU_DOMAIN.get(subject) if task.startswith("mmlu:") else _TASK_DOMAIN.get(task)
            yield Row(rec["prompt"], "routellm", task, scores, tokens, domain)


def load_routellm(root: Path) -> Iterator[Row]:
    mmlu = root / "routellm" / "mmlu"
    if mmlu.is_dir():
        drop = _contaminated(mmlu)
        for path in sorted(mmlu.glob("mmlu_*.csv")):
            yield from _routellm_csv(path, "mmlu:" + path.stem.removeprefix("mmlu_"), drop)
    gsm = root / "routellm" / "gsm8k" / "gsm8k_responses.csv"
    if gsm.exists():
        yield from _routellm_csv(gsm, "gsm8k", _contaminated(gsm.parent))


def load_routerbench(root: Path) -> Iterator[Row]:
    csv.field_size_limit(sys.maxsize)
    for path in sorted((root / "routerbench").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            cols = reader.fieldnames or []
            models = [c[: -len("|total_cost")] for c in cols if c.endswith("|total_cost")]
            for rec in reader:
                scores = {m: _bool(rec[m]) for m in models}
                if any(s is None for s in scores.values()):
                    continue  # a few arc rows have empty scores (data README)
                parts = ast.literal_eval(rec["prompt"])
                text = "\n".join(parts) if isinstance(parts, list) else str(parts)
                tokens = [approx_tokens(r) for m in models if (r := rec.get(f"{m}|model_response"))]
                task = rec["eval_name"]
                yield Row(text, "routerbench", task, scores, tokens, _TASK_DOMAIN.get(task))  # type: ignore[arg-type]


def load_routerdc(root: Path) -> Iterator[Row]:
    for path in sorted((root / "routerdc").glob("*.json")):
        task = path.stem.removesuffix("_train").removesuffix("-train").replace("_", "-")
        with path.open(encoding="utf-8") as f:
            items = json.load(f)
        for item in items:
            scores = {m: min(1.0, max(0.0, float(s))) for m, s in item["scores"].items()}
            yield Row(item["question"], "routerdc", task, scores, [], _TASK_DOMAIN.get(task))


def load_rows(root: Path, *, limit: int | None = None) -> list[Row]:
    """Every row of the shared data under ``root`` (RouteLLM contaminated prompts dropped).

    Args:
        root: the data folder (``../shared/data``).
        limit: keep every k-th row so that about ``limit`` rows remain (smoke tests).

    Raises:
        FileNotFoundError: ``root`` does not exist or holds none of the known layouts.
    """
    if not root.is_dir():
        raise FileNotFoundError(f"data folder {root} not found")
    rows = [*load_routellm(root), *load_routerbench(root), *load_routerdc(root)]
    if not rows:
        raise FileNotFoundError(f"no RouteLLM, RouterBench or RouterDC files under {root}")
    if limit and len(rows) > limit:
        step = len(rows) / limit
        rows = [rows[int(i * step)] for i in range(limit)]
    return rows
