"""`catalog import --repos FILE`: pin a list of models (the list an engine's tests already keep) from the Hub.

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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
        raise UsageError(f"{len(problems)} bad line(s) in the list, nothing was pinned: {'; '.join(problems)}",
                         hint="one repo a line: org/name[@revision] [--gpu CLASS]; '#' starts a comment")
    return listed


def import_list(listed: Sequence[Listed], settings: CatalogSettings, catalog_dir: Path, hub: HubOptions,
                gpu: str | None) -> list[Imported]:
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
            why = "" if is_commit else (f" (the list's {item.ref!r} is not followed: "
                                        f"`catalog add {item.repo} --revision {item.ref}` pins its commit now)")
            done.append(Imported(label, Outcome.SKIPPED, f"already pinned as {same!r}{why}", name=same))
            continue
        org, _, base = item.repo.partition("/")
        names = [derive_name(base), derive_name(f"{org}-{base}")] + ([f"{derive_name(base)}-{item.ref[:12]}"] if is_commit else [])
        name = next((n for n in names if n not in taken), None)
        if name is None:
            done.append(Imported(label, Outcome.REFUSED, f"{item.where}: the names {', '.join(names)} are taken; "
                                                         f"add it by hand: catalog add {item.repo} --revision {item.ref} --name NAME"))
            continue
        if unreachable is not None:
            done.append(Imported(label, Outcome.REFUSED, f"{item.where}: not tried: the Hub at {hub.endpoint} gave no "
                                                         f"answer at {unreachable}"))
            continue
        try:
            new = add_model(item.repo, item.ref, name=name, load_format=None, gpu=item.gpu or gpu, settings=settings,
                            catalog_dir=catalog_dir, hub=hub)
        except HubUnreachableError as exc:
            unreachable = item.where
            done.append(Imported(label, Outcome.REFUSED, f"{item.where}: {said(exc)}"))
            continue
        except CatalogError as exc:
            done.append(Imported(label, Outcome.REFUSED, f"{item.where}: {said(exc)}"))
            continue
        done.append(Imported(f"{item.repo}@{new.revision[:12]}", Outcome.WRITTEN, f"{item.ref} was {new.revision[:12]}",
                             new.name, new.path))
    return done
