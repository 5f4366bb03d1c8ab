"""`catalog import --repos FILE`: pin a list of models (the list an engine's tests already keep) from the Hub; and
`catalog import --model-list FILE`: a list with per-model engine flags and environment (below), pinned with profiles.

One repo id a line, an optional `@revision` (a commit, or a branch or tag turned into its commit once, as
`catalog add` does) and an optional GPU class (`--gpu CLASS`, or the class alone):

    # the models our tests load
    facebook/opt-125m
    Qwen/Qwen2-0.5B-Instruct@main --gpu l4
    meta-llama/Llama-3.2-1B@4e20de362430cd3b72f300e6b0f18e50e7166e08 h100

Each line is `catalog add`ed (`resolver/add.py`: name, prefix, load format, excludes and lock as add decides
them). A repo the catalog already pins is skipped without a Hub request when the line names a branch (the
list is not followed: pins never move) or names the commit already pinned; a failing line is reported and the
others go on, except when the Hub gave no answer at all: the lines after it are refused without asking again
(each would wait out the same retries).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from catalog import naming
from catalog.errors import CatalogError, UsageError
from catalog.schema import CatalogSettings
from resolver.add import add_model, derive_name
from resolver.hf_import import Imported, Outcome, existing_docs, pinned_as, said
from resolver.hub import HubOptions, HubUnreachableError


@dataclass(frozen=True)
class Listed:
    repo: str
    ref: str
    gpu: str | None
    where: str  # file:line


def parse_repo_list(text: str, display: str, gpu_classes: Sequence[str]) -> list[Listed]:
    """Pure: every line of a list, or UsageError naming each bad line (file:line: what; nothing is pinned then)."""
    listed: list[Listed] = []
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = raw.split("#", 1)[0].split()
        if not tokens:
            continue
        where = f"{display}:{number}"
        repo, _, ref = tokens[0].partition("@")
        rest = tokens[1:]
        if rest[:1] == ["--gpu"]:
            rest = rest[1:]
        elif rest and rest[0].startswith("--gpu="):
            rest = [rest[0].split("=", 1)[1]]
        if (message := naming.check_hf_repo(repo)) is not None:
            problems.append(f"{where}: {message}")
        elif len(rest) > 1 or (rest and rest[0].startswith("-")):
            problems.append(f"{where}: expected `org/name[@revision] [--gpu CLASS]`, got {raw.strip()!r}")
        elif rest and rest[0] not in gpu_classes:
            problems.append(f"{where}: unknown GPU class {rest[0]!r} (known: {', '.join(sorted(gpu_classes))})")
        elif (repo.casefold(), ref or "main") in seen:
            problems.append(f"{where}: {tokens[0]} is listed again (first at {seen[(repo.casefold(), ref or 'main')]})")
        else:
            seen[(repo.casefold(), ref or "main")] = where
            listed.append(Listed(repo, ref or "main", rest[0] if rest else None, where))
    if problems:
        raise UsageError(
            f"{len(problems)} bad line(s) in the list, nothing was pinned: {'; '.join(problems)}",
            hint="one repo a line: org/name[@revision] [--gpu CLASS]; '#' starts a comment",
        )
    return listed


def import_list(
    listed: Sequence[Listed], settings: CatalogSettings, catalog_dir: Path, hub: HubOptions, gpu: str | None
) -> list[Imported]:
    """`catalog add` each listed repo (its GPU class, else `gpu`, else the catalog's default)."""
    done: list[Imported] = []
    unreachable: str | None = None  # the line at which the Hub gave no answer
    for item in listed:
        label = f"{item.repo}@{item.ref}"
        existing, taken = existing_docs(catalog_dir)
        is_commit = naming.check_revision(item.ref) is None
        # A branch is turned into a commit once: a repo pinned at any commit is not looked up again.
        same = pinned_as(existing, item.repo, item.ref if is_commit else None, None)
        if same is not None:
            why = (
                ""
                if is_commit
                else (
                    f" (the list's {item.ref!r} is not followed: "
                    f"`catalog add {item.repo} --revision {item.ref}` pins its commit now)"
                )
            )
            done.append(Imported(label, Outcome.SKIPPED, f"already pinned as {same!r}{why}", name=same))
            continue
        org, _, base = item.repo.partition("/")
        names = [derive_name(base), derive_name(f"{org}-{base}")] + (
            [f"{derive_name(base)}-{item.ref[:12]}"] if is_commit else []
        )
        name = next((n for n in names if n not in taken), None)
        if name is None:
            done.append(
                Imported(
                    label,
                    Outcome.REFUSED,
                    f"{item.where}: the names {', '.join(names)} are taken; "
                    f"add it by hand: catalog add {item.repo} --revision {item.ref} --name NAME",
                )
            )
            continue
        if unreachable is not None:
            done.append(
                Imported(
                    label,
                    Outcome.REFUSED,
                    f"{item.where}: not tried: the Hub at {hub.endpoint} gave no answer at {unreachable}",
                )
            )
            continue
        try:
            new = add_model(
                item.repo,
                item.ref,
                name=name,
                load_format=None,
                gpu=item.gpu or gpu,
                settings=settings,
                catalog_dir=catalog_dir,
                hub=hub,
            )
        except HubUnreachableError as exc:
            unreachable = item.where
            done.append(Imported(label, Outcome.REFUSED, f"{item.where}: {said(exc)}"))
            continue
        except CatalogError as exc:
            done.append(Imported(label, Outcome.REFUSED, f"{item.where}: {said(exc)}"))
            continue
        done.append(
            Imported(
                f"{item.repo}@{new.revision[:12]}",
                Outcome.WRITTEN,
                f"{item.ref} was {new.revision[:12]}",
                new.name,
                new.path,
            )
        )
    return done


# -- `catalog import --model-list FILE`: a model list with per-model engine flags -----------------------------------
# The shape of vLLM's `.buildkite/amd-disagg/models.yaml`: a top-level `models:` list, each entry a `model` (a repo
# id, or a name with `hf_repo:`), its `env`, and flags as the launcher splices them into `vllm serve` (whitespace-split
# strings: `base_flags`, `flags`, `experimental_flags`). Per-role flags (`prefill:`/`decode:` of a disaggregated
# launcher) are the launcher's, not the model's: said and left out.
FLAG_KEYS = ("base_flags", "flags", "experimental_flags")
ROLE_KEYS = ("prefill", "decode")
ENTRY_KEYS = frozenset({"model", "hf_repo", "revision", "gpu", "env", *FLAG_KEYS, *ROLE_KEYS})
LAUNCHER_ARGS = frozenset({"host", "port"})  # where the server listens: the job's, not the model's


@dataclass(frozen=True)
class ListedModel:
    repo: str
    ref: str
    gpu: str | None
    args: dict[str, Any]  # the profile's arguments, in the list's order
    env: dict[str, str]
    left_out: tuple[str, ...]  # what the list says that a profile does not carry, each with why
    where: str  # file:line


def _value(text: str) -> Any:
    """A flag's value as a manifest writes it: a whole number, a number, a JSON object, or text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def parse_flags(flags: str) -> tuple[dict[str, Any], list[str]]:
    """Pure: launcher flags (split on whitespace, as an unquoted shell expansion splits them) -> profile arguments, and
    what was left out (the catalog's own arguments, where the server listens, stray words), each with why."""
    from catalog.rules import CATALOG_ENGINE_ARGS

    args: dict[str, Any] = {}
    left_out: list[str] = []
    tokens = flags.split()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            left_out.append(f"{token!r}: a value without a flag")
            continue
        name, eq, inline = token[2:].partition("=")
        name = name.replace("_", "-")
        if eq:
            value: Any = _value(inline)
        elif i < len(tokens) and not tokens[i].startswith("--"):
            value, i = _value(tokens[i]), i + 1
        else:
            value = True
        if name.startswith("no-") and value is True:
            name, value = name[3:], False
        if name in CATALOG_ENGINE_ARGS:
            left_out.append(
                f"--{name}: the catalog derives it from the manifest"
                + (" (allow_code, once the model's code is reviewed)" if name == "trust-remote-code" else "")
            )
        elif name in LAUNCHER_ARGS:
            left_out.append(f"--{name}: the job's, not the model's")
        else:
            args[name] = value
    return args, left_out


def parse_model_list(text: str, display: str, gpu_classes: Sequence[str]) -> list[ListedModel]:
    """Pure: every entry of a model list, or UsageError naming each bad entry (file:line: what; nothing is written)."""
    from catalog import yamlsource
    from catalog.rules import CATALOG_ENV_PREFIXES, SECRET_WORDS

    try:
        located = yamlsource.parse(text)
    except yamlsource.YamlProblem as exc:
        raise UsageError(f"{display}:{exc.line}: {exc.message}") from None
    entries = located.data.get("models") if isinstance(located.data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(
            f"{display}:1: a model list is a mapping with a `models:` list", hint="see `catalog import --help`"
        )
    listed: list[ListedModel] = []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        where = f"{display}:{located.lines.line_of(('models', index))}"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            problems.append(f"{where}: an entry is a mapping with a `model:` (a repo id, or a name with `hf_repo:`)")
            continue
        unknown = sorted(set(entry) - ENTRY_KEYS)
        repo = str(entry.get("hf_repo") or entry["model"])
        gpu = entry.get("gpu")
        env = entry.get("env") or {}
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(ENTRY_KEYS))})")
        elif (message := naming.check_hf_repo(repo)) is not None:
            problems.append(
                f"{where}: {message}" + ("" if "hf_repo" in entry else f"; give `hf_repo:` for {entry['model']!r}")
            )
        elif gpu is not None and gpu not in gpu_classes:
            problems.append(f"{where}: unknown GPU class {gpu!r} (known: {', '.join(sorted(gpu_classes))})")
        elif not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            problems.append(f"{where}: env is a mapping of variable names to quoted values")
        elif any(not isinstance(entry.get(k, ""), str) for k in FLAG_KEYS):
            problems.append(f"{where}: {', '.join(FLAG_KEYS)} are strings of flags")
        else:
            args: dict[str, Any] = {}
            left_out: list[str] = []
            for key in FLAG_KEYS:
                more, dropped = parse_flags(str(entry.get(key) or ""))
                args |= more
                left_out += dropped
            left_out += [
                f"{role}: per-role flags of a disaggregated launcher, not the model's"
                for role in ROLE_KEYS
                if role in entry
            ]
            kept: dict[str, str] = {}
            for name, value in env.items():
                if name.upper().startswith(CATALOG_ENV_PREFIXES):
                    left_out.append(f"env {name}: set by the catalog or the store")
                elif set(name.upper().split("_")) & SECRET_WORDS:
                    left_out.append(f"env {name}: named like a credential (never in a manifest)")
                else:
                    kept[name] = value
            listed.append(
                ListedModel(repo, str(entry.get("revision") or "main"), gpu, args, kept, tuple(left_out), where)
            )
    if problems:
        raise UsageError(
            f"{len(problems)} bad entr{'y' if len(problems) == 1 else 'ies'} in the list, nothing was written: "
            f"{'; '.join(problems)}"
        )
    return listed


def profile_block(gpu_class: str, args: dict[str, Any], env: dict[str, str]) -> str:
    """The `profiles:` block a manifest gets for one class (YAML, the list's order kept)."""
    profile: dict[str, Any] = {}
    if args:
        profile["args"] = args
    if env:
        profile["env"] = env
    return yaml.safe_dump({"profiles": {gpu_class: profile}}, sort_keys=False, default_flow_style=False, width=120)


def with_profile_text(text: str, listed: ListedModel, gpu_class: str) -> str:
    """A written manifest's text with the entry's profile before its `files:` block, and `gpu.count` raised to the
    ranks its flags ask for (tensor x pipeline parallel size)."""
    ranks = 1
    for key in ("tensor-parallel-size", "pipeline-parallel-size"):
        value = listed.args.get(key)
        ranks *= value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
    if ranks > 1:
        text = text.replace(f"gpu: {{class: {gpu_class}}}\n", f"gpu: {{class: {gpu_class}, count: {ranks}}}\n", 1)
    block = profile_block(gpu_class, listed.args, listed.env) if listed.args or listed.env else ""
    head, sep, tail = text.partition("\nfiles:")
    return head + "\n" + block + sep.lstrip("\n") + tail if sep else text + block


def import_model_list(
    listed: Sequence[ListedModel],
    settings: CatalogSettings,
    catalog_dir: Path,
    hub: HubOptions,
    gpu: str | None,
    hf_cache: Path | None,
) -> list[Imported]:
    """Pin each listed model with its profile: from the HF cache `hf_cache` where it holds the repo at the listed
    revision (no Hub request), else from the Hub as `catalog add` pins it. A repo the catalog pins already is
    skipped (its profile is not rewritten: said, with the block to add)."""
    from resolver.hf_import import find_snapshots, import_from_cache
    from resolver.lock import atomic_text_write

    done: list[Imported] = []
    for item in listed:
        gpu_class = item.gpu or gpu or settings.default_gpu
        existing, _ = existing_docs(catalog_dir)
        same = pinned_as(existing, item.repo, item.ref if naming.check_revision(item.ref) is None else None, None)
        if same is not None:
            block = profile_block(gpu_class, item.args, item.env).replace("\n", " ").strip()
            done.append(
                Imported(
                    f"{item.repo}@{item.ref}",
                    Outcome.SKIPPED,
                    f"already pinned as {same!r}; its profile is not rewritten: add `{block}` to it by hand",
                    name=same,
                )
            )
            continue
        cached = hf_cache is not None and not find_snapshots(hf_cache, [f"{item.repo}@{item.ref}"])[1]
        if cached:
            assert hf_cache is not None
            results = import_from_cache(
                hf_cache,
                [f"{item.repo}@{item.ref}"],
                catalog_dir,
                settings,
                gpu=gpu_class,
                load_format=None,
                deep=False,
            )
        else:
            results = import_list(
                [Listed(item.repo, item.ref, gpu_class, item.where)], settings, catalog_dir, hub, gpu_class
            )
        for result in results:
            if result.outcome is Outcome.WRITTEN and result.path is not None:
                atomic_text_write(
                    result.path, with_profile_text(result.path.read_text(encoding="utf-8"), item, gpu_class)
                )
                said = f"{result.message}, {'from the HF cache' if cached else 'from the Hub'}, profile {gpu_class}"
                if item.left_out:
                    said += "; left out: " + "; ".join(item.left_out)
                result = Imported(result.label, result.outcome, said, result.name, result.path, result.files)
            done.append(result)
    return done
