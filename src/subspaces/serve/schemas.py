"""Request bodies. Types are strict (a number is not a text, a string is not a number): a wrong type is a 422.

Unknown fields are ignored, as OpenAI's API does (its client sends ``user`` and others).
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[StrictStr] = None


class EmbeddingRequest(_Request):
    """OpenAI's ``POST /v1/embeddings`` body (token-id inputs are not accepted: texts only)."""

    input: Union[StrictStr, list[StrictStr]]
    dimensions: Optional[StrictInt] = None
    encoding_format: Literal["float", "base64"] = "float"
    user: Optional[StrictStr] = None


class SimilarityRequest(_Request):
    """Pairs of texts; under ``condition`` their similarity is the Hyper-CL head's (``--head``)."""

    pairs: list[tuple[StrictStr, StrictStr]] = Field(min_length=1)
    condition: Optional[StrictStr] = None
    dimensions: Optional[StrictInt] = None


class SearchRequest(_Request):
    """The ``k`` nearest store rows to ``query``, ranked at ``dimensions`` (the store's funnel)."""

    query: StrictStr
    k: StrictInt = Field(default=10, ge=1, le=1000)
    dimensions: Optional[StrictInt] = None
    condition: Optional[StrictStr] = None
