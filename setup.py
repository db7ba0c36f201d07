"""Package discovery (the rest of the build configuration is in pyproject.toml).

``find_packages`` finds ``budget_envs`` and its sub-packages, and the packages under the two
top-level folders that ``[tool.setuptools.package-dir]`` maps into it (``wrappers/`` installs as
``budget_envs.wrappers``, ``registry/`` as ``budget_envs.registry``), which discovery alone
cannot name. No package is listed by hand, so a new sub-package ships without a config edit.
"""

from pathlib import Path

from setuptools import find_packages, setup

try:
    import tomllib
except ImportError:  # Python 3.10: the build requirements bring tomli
    import tomli as tomllib

_HERE = Path(__file__).resolve().parent
_PYPROJECT = tomllib.loads((_HERE / "pyproject.toml").read_text(encoding="utf-8"))
_MAPPED = _PYPROJECT["tool"]["setuptools"]["package-dir"]

packages = find_packages(where=str(_HERE), include=["budget_envs", "budget_envs.*"])
for name, folder in _MAPPED.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(where=str(_HERE / folder))]

setup(packages=packages)
