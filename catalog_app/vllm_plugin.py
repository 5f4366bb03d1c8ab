"""vLLM's `--load-format catalog`: a model loader, registered by this package, that lets no tensor reach the model
before its bytes match a pin.

vLLM calls `register` in every process it starts (the `vllm.general_plugins` entry point in pyproject.toml); it
registers `CatalogModelLoader` under the load format "catalog" through vLLM's own `register_model_loader`. No
part of vLLM is patched. `catalog resolve NAME --format vllm-args` prints what it needs:

    --model <verified local folder: config, tokenizer> --served-model-name NAME --load-format catalog
    --model-loader-extra-config.model=NAME --model-loader-extra-config.catalog=DIR ... [--tensor-parallel-size N]

The loader resolves the model's weights the way `catalog resolve` does (catalog_app/verified_loader.py: the
same settings, cache, tiers, mirrors and store) and streams them with resolver/verified_load.py, which hashes
every tensor against its pinned digest before yielding it. A model's own `load_weights` gets only those; a
per-rank checkpoint (runai_streamer_sharded) is copied into each rank's parameters as vLLM's sharded loader
does, one rank's files per rank. Then vLLM's common path finishes the load (process_weights_after_loading).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from catalog.errors import CatalogError
from catalog_app.verified_loader import LoadRequest, LoadSession

LOAD_FORMAT = "catalog"
log = logging.getLogger(__name__)


def register() -> None:
    """The entry point: make `--load-format catalog` known to this vLLM process (once)."""
    from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER, register_model_loader

    if LOAD_FORMAT not in _LOAD_FORMAT_TO_MODEL_LOADER:
        register_model_loader(LOAD_FORMAT)(_loader_class())


def _loader_class() -> type:
    from torch import nn
    from vllm.config import ModelConfig
    from vllm.config.load import LoadConfig
    from vllm.logger import init_logger
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    engine_log = init_logger(__name__)

    class CatalogModelLoader(BaseModelLoader):
        """Weights by logical name, each tensor verified against its pin before the model sees it."""

        def __init__(self, load_config: LoadConfig) -> None:
            super().__init__(load_config)
            try:
                self.request = LoadRequest.from_config(load_config.model_loader_extra_config or {})
            except CatalogError as exc:
                raise ValueError(_said(exc)) from None

        def download_model(self, model_config: ModelConfig) -> None:
            """Nothing to download ahead: the load streams and verifies. Opening the catalog here says early what
            is wrong (an unknown name, a refused signature, unpinned tensors)."""
            self._session().plan(None)

        def load_weights(self, model: nn.Module, model_config: ModelConfig) -> None:
            session = self._session()
            rank = _tensor_parallel_rank() if session.per_rank else None
            try:
                if session.per_rank:
                    _copy_into_parameters(model, session.tensors(rank))
                else:
                    loadable: Any = model  # every vLLM model class has load_weights; nn.Module does not say so
                    loadable.load_weights(session.tensors(rank))
            except CatalogError as exc:
                raise RuntimeError(_said(exc)) from None
            for record in session.records:
                engine_log.info("catalog: %s", record.summary())

        def _session(self) -> LoadSession:
            try:
                return LoadSession.open(self.request)
            except CatalogError as exc:
                raise ValueError(_said(exc)) from None

    return CatalogModelLoader


def _said(exc: CatalogError) -> str:
    """The one line the CLI would print, for the engine's error."""
    return f"{exc.message}" + (f" (hint: {exc.hint})" if exc.hint else "")


def _tensor_parallel_rank() -> int:
    from vllm.distributed import get_tensor_model_parallel_rank

    return int(get_tensor_model_parallel_rank())


def _copy_into_parameters(model: Any, tensors: Iterator[tuple[str, Any]]) -> None:
    """A per-rank checkpoint holds each rank's parameters exactly as the rank's model names and shapes them (what
    vLLM's ShardedStateLoader loads): copy each verified tensor into its parameter (a parameter padded larger, as with
    LoRA, takes it in its leading slice), and fail on any parameter the checkpoint does not fill."""
    from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

    state = ShardedStateLoader._filter_subtensors(model.state_dict())  # noqa: SLF001 - vLLM's own rule for aliases
    for name, tensor in tensors:
        param = state.pop(name, None)
        if param is None:
            raise RuntimeError(f"the checkpoint's tensor {name} is not a parameter of this rank's model")
        data = param.data
        for dim, size in enumerate(tensor.shape):
            if size < data.shape[dim]:
                data = data.narrow(dim, 0, size)
        data.copy_(tensor)
    if state:
        raise RuntimeError(
            f"the checkpoint lacks {len(state)} parameter(s) of this rank: {', '.join(sorted(state)[:5])}"
        )
