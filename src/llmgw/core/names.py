"""Name rules for what an operator hands the catalog: model names, Hugging Face repo ids, file
names and revisions, and the environment variables a remote model's key may come from.

Each `check_*` returns the value or raises ValueError saying the rule (never echoing the value),
so pydantic validators and services can share them.
"""

from __future__ import annotations

import re
from collections.abc import Collection

# Model names appear in URLs, CLI arguments, OpenAI requests and log lines: '/'-separated parts,
# each starting with a letter or digit, so no part is empty, '.' or '..'.
MODEL_NAME_MAX = 128
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9][A-Za-z0-9._:-]*)*$"
_NAME_RE = re.compile(NAME_PATTERN)
MODEL_NAME_RULE = (
    f"name must be 1-{MODEL_NAME_MAX} characters of letters, digits and . _ : / -, each "
    "'/'-separated part starting with a letter or digit"
)

# The Hub's own repo id rule: [owner/]name, each part at most 96 characters.
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$")
_REV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,254}$")
# A file in a repo: parts of these characters; each part short enough that the cache's
# `.part` and `.meta.json` siblings still fit a file system's 255-byte name limit.
_FILE_PART_RE = re.compile(r"^[A-Za-z0-9._+=@,()\[\]-]{1,200}$")
FILE_MAX = 512

# A remote provider's key may come from these variables only: a fixed prefix, or names the
# admin lists in config.toml (`provider_key_env`), so a catalog entry cannot make the server
# send any other variable of its environment (PATH, a database password) to a URL.
PROVIDER_KEY_PREFIX = "LLMGW_PROVIDER_"
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
PROVIDER_KEY_RULE = (
    f"must name an environment variable starting with {PROVIDER_KEY_PREFIX} or one listed in "
    "provider_key_env in the server's config.toml"
)


def check_model_name(v: str) -> str:
    """A catalog model name (the rule the docs state: how-to/hugging-face)."""
    if len(v) > MODEL_NAME_MAX or not _NAME_RE.fullmatch(v):
        raise ValueError(MODEL_NAME_RULE)
    return v


def check_repo(v: str) -> str:
    """A Hugging Face repo id, `owner/name`."""
    if not _REPO_RE.fullmatch(v) or ".." in v:
        raise ValueError("repo must look like 'owner/name' (letters, digits, - _ .)")
    return v


def check_file(v: str) -> str:
    """A file's path inside a Hub repo: relative, '/'-separated, no '.' or '..' parts."""
    parts = v.split("/")
    if (
        not v
        or len(v) > FILE_MAX
        or any(p in (".", "..") or not _FILE_PART_RE.fullmatch(p) for p in parts)
    ):
        raise ValueError(
            f"file must be a relative path inside the repo (at most {FILE_MAX} characters; "
            "parts of letters, digits and . _ - + = @ , ( ) [ ], none of them '.' or '..')"
        )
    return v


def check_revision(v: str) -> str:
    """A branch, tag or commit."""
    if not _REV_RE.fullmatch(v) or ".." in v or any(p in ("", ".") for p in v.split("/")):
        raise ValueError("revision must be a branch, tag or commit name")
    return v


def check_env_name(v: str) -> str:
    """The syntax of an environment variable name."""
    if not _ENV_RE.fullmatch(v):
        raise ValueError("must be an environment variable name (letters, digits and _)")
    return v


def provider_key_allowed(name: str, allowed: Collection[str]) -> bool:
    """Whether a remote model may read its key from variable `name`."""
    if not _ENV_RE.fullmatch(name):
        return False
    return (name.startswith(PROVIDER_KEY_PREFIX) and len(name) > len(PROVIDER_KEY_PREFIX)) or (
        name in allowed
    )


# A GPU class, as nodes offer GPUs and profiles ask for them (`h200`, `a100-80gb`).
_GPU_CLASS_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
GPU_CLASS_RULE = "a GPU class is 1-64 lower-case letters, digits and . _ -, starting with a letter or digit"


def check_gpu_class(name: str) -> str:
    """`name` when it may be a GPU class; ValueError saying the rule otherwise."""
    if not _GPU_CLASS_RE.match(name):
        raise ValueError(GPU_CLASS_RULE)
    return name
