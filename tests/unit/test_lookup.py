"""The lookup API's answers to typos: an error that says what is known, never an empty list or a bare KeyError."""

from __future__ import annotations

import pytest

from catalog.errors import UnknownModelError, UsageError
from catalog.lookup import Catalog


def test_an_unknown_name_suggests_close_ones_in_its_text_too(bundled: Catalog) -> None:
    with pytest.raises(UnknownModelError) as caught:
        bundled.get("tiny-lama")
    assert str(caught.value).startswith("no model named 'tiny-lama' in the catalog; did you mean tiny-llama")


def test_filter_refuses_an_unknown_class_or_format_instead_of_answering_nothing(bundled: Catalog) -> None:
    assert [m.name for m in bundled.filter(gpu="cpu", load_format="runai_streamer")] == ["tiny-qwen2"]
    with pytest.raises(UsageError, match="unknown GPU class 'l5'") as gpu:
        bundled.filter(gpu="l5")
    assert "l4" in (gpu.value.hint or "")
    with pytest.raises(UsageError, match="unknown load format 'streamer'") as fmt:
        bundled.filter(load_format="streamer")
    assert "runai_streamer" in (fmt.value.hint or "")
