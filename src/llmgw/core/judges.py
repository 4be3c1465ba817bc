"""The judges llmgw knows by name (data only; prompts and parsers live in the guard layer)."""

from __future__ import annotations

from llmgw.core import names
from llmgw.core.errors import InvalidRequest
from llmgw.core.guard import JudgeFormat, JudgeSpec

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


def check_enabled(spec: JudgeSpec) -> None:
    """Refuse (InvalidRequest) a judge to enable whose repo, file or name could not be fetched
    and served safely: each is stored and later used as a path and a catalog name."""
    for param, check, value in (("repo", names.check_repo, spec.repo),
                                ("file", names.check_file, spec.file),
                                ("name", names.check_model_name, spec.name)):
        try:
            check(value)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param=param) from None
