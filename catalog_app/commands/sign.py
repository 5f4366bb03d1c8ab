"""`catalog sign`: a model-signing v1.0 signature over each model's pins, written as `<name>.sig` beside its
manifest, and pushed as an OCI referrer of the model's artifact where the store or a mirror is oci:// (so registry
users see and verify it with standard tools). Reads no weight byte; the work is resolver/signatures.py's and the
OCI store's (`push_referrer`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from catalog.errors import UsageError
from catalog_app.context import invocation


@click.command("sign")
@click.argument("names", nargs=-1)
@click.option("--all", "all_models", is_flag=True, help="Every model in the catalog.")
@click.option(
    "--private-key",
    type=click.Path(path_type=Path),
    metavar="PEM",
    help="The EC private key (P-256 or P-384; PEM) to sign with (required unless --subject-into).",
)
@click.option(
    "--certificate",
    type=click.Path(path_type=Path),
    metavar="CHAIN",
    help="The key's certificate chain (PEM: the signing certificate first, then intermediates), for keys "
    "an organisation's CA issued; verifiers then trust its root instead of the key.",
)
@click.option(
    "--subject-into",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Sign nothing: write the model's signed subject (the manifest fields that change what is loaded) "
    "into DIR as .model-catalog-subject.json, for a folder another tool (model_signing sign) signs.",
)
@click.option(
    "--no-push", is_flag=True, help="Write the .sig files only: push no signature to an oci:// store or mirror."
)
@click.pass_context
def sign_command(
    ctx: click.Context,
    names: tuple[str, ...],
    all_models: bool,
    private_key: Path | None,
    certificate: Path | None,
    subject_into: Path | None,
    no_push: bool,
) -> int:
    """Sign the pins of NAMES (or --all): writes <name>.sig beside each <name>.yaml (OpenSSF model-signing
    format, verifiable with `model_signing verify` against a resolved view) and, where the store or a mirror is
    oci://, pushes it as a referrer of the model's artifact (`oras discover` lists it)."""
    from catalog.errors import CatalogError
    from resolver.signatures import sign, verify_bundle, write, write_subject
    from resolver.stores.modelpack import SIGNATURE_TYPE
    from resolver.stores.oci import referrer_stores

    if bool(names) == all_models:
        raise UsageError("name one or more models, or pass --all")
    if subject_into is not None:
        if len(names) != 1:
            raise UsageError("--subject-into writes one model's subject: name exactly one model")
        click.echo(write_subject(invocation(ctx, only=names).catalog.get(names[0]), subject_into))
        return 0
    if private_key is None:
        raise UsageError("--private-key PEM is required to sign")
    inv = invocation(ctx, only=None if all_models else names)
    current, cat = inv.settings, inv.catalog
    selected = [m.name for m in cat.filter()] if all_models else list(dict.fromkeys(names))
    for name in selected:
        cat.get(name)  # unknown names fail before anything is written
    password = _password(private_key)
    anchors = inv.anchors if inv.policy.anchors else None
    registries = [] if no_push else referrer_stores(cat, current)  # the oci:// store and mirrors
    failed = 0
    for name in selected:
        bundle = sign(cat.get(name), private_key, certificate, password)
        path = write(bundle, cat.sources[name])
        click.echo(f"signed {name}: {path} ({len(cat.get(name).files)} files)")
        if anchors is not None:
            try:
                verify_bundle(bundle, anchors)
            except ValueError as exc:  # Untrusted: the catalog's verifiers will refuse it
                click.echo(f"warning: {name}: {exc}", err=True)
        for registry in registries:
            try:
                digest = registry.push_referrer(cat.get(name), SIGNATURE_TYPE, bundle.render(), path.name)
            except CatalogError as exc:
                failed += 1
                click.echo(f"error: {name}: the signature was not pushed to {registry.url}: {exc.message}", err=True)
                continue
            click.echo(f"pushed {name}'s signature to {registry.url} as a referrer of its artifact ({digest})")
    if failed:
        click.echo(
            "hint: the .sig files are written; run `catalog sign` again with registry access, or pass --no-push",
            err=True,
        )
    return 1 if failed else 0


def _password(private_key: Path) -> bytes | None:
    """The key's password, asked on a terminal when the PEM is encrypted (never from an argument)."""
    try:
        encrypted = b"ENCRYPTED" in private_key.read_bytes()
    except OSError as exc:
        raise UsageError(f"--private-key {private_key}: {exc.strerror or exc}") from None
    if not encrypted or not sys.stdin.isatty():
        return None
    return str(click.prompt(f"password for {private_key}", hide_input=True)).encode()


COMMANDS = (sign_command,)
