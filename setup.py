"""The compiled core of kpurgatory.impl (a C extension); everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kpurgatory.impl._core", ["impl/_core.c"], extra_compile_args=["-O2"])])
