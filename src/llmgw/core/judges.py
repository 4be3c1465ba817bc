"""The judges llmgw knows by name (data only; prompts and parsers live in the guard layer)."""

from __future__ import annotations

import re

from llmgw.core.errors import InvalidRequest
from llmgw.core.guard import JudgeFormat, JudgeSpec
from llmgw.core.types import NAME_PATTERN

DEMO_JUDGE = "demo-judge"
DEFAULT_JUDGE = "qwen3guard-0.6b"
DEMO_NOTE = "not a safety model: the demo Gemma 3 270M speaking the Qwen3Guard format"

KNOWN: dict[str, JudgeSpec] = {
    j.name: j
    for j in [
        JudgeSpec(name="qwen3guard-0.6b", repo="QuantFactory/Qwen3Guard-Gen-0.6B-GGUF",
                  file="Qwen3Guard-Gen-0.6B.Q8_0.gguf", size_gb=0.81),
        JudgeSpec(name="qwen3guard-4b", repo="mradermacher/Qwen3Guard-Gen-4B-GGUF",
                  file="Qwen3Guard-Gen-4B.Q4_K_M.gguf", size_gb=2.7),
        JudgeSpec(name="qwen3guard-8b", repo="mradermacher/Qwen3Guard-Gen-8B-GGUF",
                  file="Qwen3Guard-Gen-8B.Q4_K_M.gguf", size_gb=5.0, gpu=True),
        JudgeSpec(name="llama-guard-3-1b", repo="QuantFactory/Llama-Guard-3-1B-GGUF",
                  file="Llama-Guard-3-1B.Q8_0.gguf", size_gb=1.6, format=JudgeFormat.LLAMA_GUARD,
                  categories=13),
        JudgeSpec(name="llama-guard-3-8b", repo="QuantFactory/Llama-Guard-3-8B-GGUF",
                  file="Llama-Guard-3-8B.Q4_K_M.gguf", size_gb=4.9, gpu=True,
                  format=JudgeFormat.LLAMA_GUARD, categories=14),
        JudgeSpec(name=DEMO_JUDGE, repo="local/demo", file="gemma-3-270m-q4_k_m.gguf",
                  size_gb=0.24, note=DEMO_NOTE),
    ]
}


def known(name: str) -> JudgeSpec | None:
    """The built-in spec for `name`, if llmgw knows it."""
    return KNOWN.get(name)


# A Hub repo id is `owner/name`; both parts as the Hub allows them, never "." or "..".
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_NAME_RE = re.compile(NAME_PATTERN)
# Control characters (NUL among them) have no place in a file name the cache turns into a path.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_enabled(spec: JudgeSpec) -> None:
    """Refuse (InvalidRequest) a judge to enable whose repo, file or name could not be fetched
    and served safely: each is stored and later used as a path and a catalog name."""
    if not _REPO_RE.fullmatch(spec.repo) or ".." in spec.repo:
        raise InvalidRequest("repo must be a Hugging Face repo id: OWNER/NAME of letters, digits "
                             "and - _ .", param="repo")
    parts = spec.file.split("/")
    if (not spec.file or len(spec.file) > 255 or spec.file.startswith("/") or "\\" in spec.file
            or _CONTROL_RE.search(spec.file) or any(p in ("", ".", "..") for p in parts)):
        raise InvalidRequest("file must be a relative path inside the repo, without '..', "
                             "backslashes or control characters", param="file")
    if not _NAME_RE.fullmatch(spec.name):
        raise InvalidRequest("name must be 1-128 characters of letters, digits and . _ : / -",
                             param="name")
