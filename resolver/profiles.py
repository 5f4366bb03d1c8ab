"""Engine profiles: what a runner of one GPU class adds to a model's engine arguments and environment (pure).

A manifest's `profiles:` say, per GPU class, the arguments and environment the model runs with there (vLLM's CPU
build needs `--dtype float32` for a float32 model it would otherwise run in bfloat16; an H100 job wants
`--max-model-len 8192`). `catalog resolve` and the pytest plugin pick the profile of the runner's class
(CATALOG_GPU_CLASS, else detected) and attach it to the Resolution; `engine_args` and `engine_env`
(resolver/resolution.py) merge it into what they print. Standard library only at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from catalog.schema import ModelManifest
    from resolver.resolution import Resolution


@dataclass(frozen=True)
class Profile:
    """A model's profile for the runner's GPU class, rendered: the engine's extra arguments (vLLM spelling), its
    environment, and the ready-time budget in seconds (None: none set)."""

    gpu_class: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    ready_budget_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_class": self.gpu_class,
            "args": list(self.args),
            "env": dict(self.env),
            "ready_budget_s": self.ready_budget_s,
        }


def flag_of(token: str) -> str:
    """The argument a flag token sets, whatever its spelling: `--no-x`, `--x=1`, `--x_y` all set `x` / `x-y`."""
    name = token[2:].split("=", 1)[0].replace("_", "-")
    return name.removeprefix("no-")


def _groups(args: Sequence[str]) -> list[tuple[str | None, list[str]]]:
    """Arguments grouped per flag: (the argument it sets, the flag and its value); a stray value stands alone."""
    groups: list[tuple[str | None, list[str]]] = []
    for token in args:
        if token.startswith("--"):
            groups.append((flag_of(token), [token]))
        elif groups and groups[-1][0] is not None and len(groups[-1][1]) == 1 and "=" not in groups[-1][1][0]:
            groups[-1][1].append(token)  # the flag's value (a number, a word, JSON; "-1" too)
        else:
            groups.append((None, [token]))
    return groups


def merge_args(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`base` with every argument `extra` sets taken out, then `extra`: one value per argument, the profile's."""
    if not extra:
        return list(base)
    wanted = {name for name, _ in _groups(extra) if name is not None}
    kept = [token for name, tokens in _groups(base) if name not in wanted for token in tokens]
    return kept + list(extra)


def profile_of(manifest: ModelManifest, gpu_class: str | None) -> Profile | None:
    """The manifest's profile for `gpu_class`, rendered; None when it has none for that class."""
    if gpu_class is None or (found := manifest.profiles.get(gpu_class)) is None:
        return None
    return Profile(gpu_class, found.command_line(), dict(found.env), found.ready_budget_s)


def with_profile(r: Resolution, manifest: ModelManifest, gpu_class: str | None) -> Resolution:
    """`r` carrying the profile `manifest` has for `gpu_class` (or none): what its engine arguments and environment
    then include."""
    return replace(r, profile=profile_of(manifest, gpu_class))
