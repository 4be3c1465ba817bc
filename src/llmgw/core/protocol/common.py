"""Shapes every admin answer shares: lists and removals."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


class DataList(BaseModel, Generic[T]):
    """A list answer: `{"data": [...]}`."""

    data: list[T]


class Removed(BaseModel):
    """A catalog model or guard policy that was removed."""

    name: str
    removed: bool = True
