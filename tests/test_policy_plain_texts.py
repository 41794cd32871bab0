"""Texts found plain are remembered with the limit they passed under; a text that is not plain is
refused every time, and a remembered text is measured again under a shorter limit."""

from __future__ import annotations

import pytest

from moeplan.errors import InputError
from moeplan.inputs.policy import check_plain, check_text


def test_a_plain_text_passes_again_and_a_control_character_is_still_refused():
    assert check_text("tensor_model_parallel_size", "layout.(key)", 256) == "tensor_model_parallel_size"
    assert check_text("tensor_model_parallel_size", "layout.(key)", 256) == "tensor_model_parallel_size"
    for _ in range(2):
        with pytest.raises(InputError) as exc:
            check_text("tensor_model\x07parallel_size", "layout.(key)", 256)
        assert "U+0007" in str(exc.value)


def test_a_remembered_text_is_measured_again_under_a_shorter_limit():
    check_text("deepseek-ai/DeepSeek-V3", "model")
    with pytest.raises(InputError) as exc:
        check_text("deepseek-ai/DeepSeek-V3", "model", 10)  # 23 characters > 10
    assert "at most 10 characters" in str(exc.value)


def test_a_document_with_a_bad_value_after_a_good_one_names_the_bad_field():
    check_plain({"model": "deepseek-ai/DeepSeek-V3"}, "")
    with pytest.raises(InputError) as exc:
        check_plain({"model": "deepseek-ai/DeepSeek-V3", "framework": "megatron\x00core"}, "")
    assert exc.value.field == "framework"
