"""Fixtures of the attention_mlx tests (helpers live in mlx_target_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from avo.plugins import reset_plugin_manager


@pytest.fixture(autouse=True)
def fresh_plugins() -> Iterator[None]:
    """Each test sees the installed plugins afresh, as a new avo process would."""
    reset_plugin_manager()
    yield
    reset_plugin_manager()
