"""``router.eval.data.load_tree``: a folder of sub-folders is one dataset with one model set."""

from __future__ import annotations

import pytest

from backends.data import DataFormatError
from router.eval.data import load_tree


def test_sub_folders_with_different_models_name_both_commands_options(tmp_path):
    """From a break-it pass: calibrate reads folders the same way, and its option is --data,
    but the error told its users to pass --test paths."""
    for sub, model in (("a", "model-a"), ("b", "model-b")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "x.csv").write_text(f'prompt,{model},model-c\n"one",True,False\n"two",False,True\n')
    with pytest.raises(DataFormatError, match=r"different models .* own path \(--test for eval, --data for calibrate\)"):
        load_tree(tmp_path)
