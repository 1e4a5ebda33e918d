"""Ways to reach a system under test: in-process Python (``--impl module:factory``) and a subprocess speaking the
JSON Lines protocol of specs/protocol.md (``--adapter "COMMAND ..."``).

The built-in implementation's adapter is ``kpurgatory.conformance.adapters.builtin:factory``.
"""

from __future__ import annotations

import importlib

import attrs
import click

from kpurgatory.conformance.sut import Hello, SystemUnderTest

BUILTIN = "kpurgatory.conformance.adapters.builtin:factory"


@attrs.frozen
class Target:
    system: SystemUnderTest
    hello: Hello


def load_factory(spec: str):
    """``package.module:factory`` -> the factory callable, with a clear error for each way it can be wrong."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise click.BadParameter(f"expected MODULE:FACTORY, got {spec!r}", param_hint="--impl")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise click.BadParameter(f"cannot import {module_name!r}: {error}", param_hint="--impl") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise click.BadParameter(f"{module_name!r} has no callable {attribute!r}", param_hint="--impl")
    return factory


def open_system(impl: str | None = None, adapter: str | None = None, timeout: float = 10.0) -> Target | None:
    """The system named by ``--impl`` or ``--adapter`` (at most one), introduced by its hello; None for neither."""
    if impl and adapter:
        raise click.UsageError("give --impl or --adapter, not both")
    if adapter:
        from kpurgatory.conformance.adapters.subprocess import SubprocessSystem

        system: SystemUnderTest = SubprocessSystem(adapter, timeout=timeout)
    elif impl:
        system = load_factory(impl)()
    else:
        return None
    return Target(system, system.hello())
