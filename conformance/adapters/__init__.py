"""Ways to reach a system under test: in-process Python (``--impl module:factory``) and a subprocess speaking the
JSON Lines protocol of specs/protocol.md (``--adapter "COMMAND ..."``).

The built-in implementation's adapter is ``kpurgatory.conformance.adapters.builtin:factory``.
"""

from __future__ import annotations

import functools
import importlib
from typing import Callable

import attrs
import click

from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest

BUILTIN = "kpurgatory.conformance.adapters.builtin:factory"
#: the built-in pure-Python implementation, whose locks a controlled scheduler can take over
BUILTIN_PYTHON = "kpurgatory.conformance.adapters.builtin:python"


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


def one_target(impl: str | None, adapter: str | None) -> None:
    """``--impl`` and ``--adapter`` name the system under test two ways: give one (a usage error, exit 2)."""
    if impl and adapter:
        raise click.UsageError("give --impl or --adapter, not both")


def system_factory(impl: str | None = None, adapter: str | None = None,
                   timeout: float = 10.0) -> Callable[[], SystemUnderTest] | None:
    """What makes a fresh system named by ``--impl`` or ``--adapter`` (at most one); None for neither."""
    one_target(impl, adapter)
    if adapter:
        from kpurgatory.conformance.adapters.subprocess import SubprocessSystem

        return functools.partial(SubprocessSystem, adapter, timeout=timeout)
    return load_factory(impl) if impl else None


def open_system(impl: str | None = None, adapter: str | None = None, timeout: float = 10.0) -> Target | None:
    """The system named by ``--impl`` or ``--adapter`` (at most one), introduced by its hello; None for neither."""
    factory = system_factory(impl, adapter, timeout)
    if factory is None:
        return None
    system = factory()
    try:
        return Target(system, system.hello())
    except BaseException:
        system.close()
        raise
