"""Request bodies. Types are strict (a number is not a text, a string is not a number): a wrong type is a 422.

Unknown fields are ignored, as OpenAI's API does (its client sends ``user`` and others). Every string must be valid
Unicode: JSON allows a lone surrogate escape (``"\\ud800"``), which no tokenizer (nor the JSON encoder of the
reply) takes; it is a 422 naming the field and the character, not a 500.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator


def _valid_unicode(text: str, what: str = "the text") -> str:
    if not text.isascii():
        from subspaces.models.encoder import unicode_problem

        problem = unicode_problem(text)
        if problem is not None:
            raise ValueError(f"{what} holds {problem}")  # pydantic makes this a 422 naming the field
    return text


Text = Annotated[StrictStr, AfterValidator(_valid_unicode)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[Text] = None


class EmbeddingRequest(_Request):
    """OpenAI's ``POST /v1/embeddings`` body (token-id inputs are not accepted: texts only)."""

    input: Union[StrictStr, list[StrictStr]]
    dimensions: Optional[StrictInt] = None
    encoding_format: Literal["float", "base64"] = "float"
    user: Optional[Text] = None

    @field_validator("input")
    @classmethod
    def _unicode_input(cls, value: Union[str, list[str]]) -> Union[str, list[str]]:
        # On the union, not its members: an error on a member would be reported once per member of the union.
        if isinstance(value, str):
            return _valid_unicode(value)
        for i, text in enumerate(value):
            _valid_unicode(text, f"text {i}")
        return value


class SimilarityRequest(_Request):
    """Pairs of texts; under ``condition`` their similarity is the Hyper-CL head's (``--head``)."""

    pairs: list[tuple[Text, Text]] = Field(min_length=1)
    condition: Optional[Text] = None
    dimensions: Optional[StrictInt] = None


class SearchRequest(_Request):
    """The ``k`` nearest store rows to ``query``, ranked at ``dimensions`` (the store's funnel)."""

    query: Text
    k: StrictInt = Field(default=10, ge=1, le=1000)
    dimensions: Optional[StrictInt] = None
    condition: Optional[Text] = None
