"""Request and response bodies (the OpenAPI schema at ``/openapi.json`` is built from them).

Request types are strict (a wrong type is a 422); unknown fields are ignored, as OpenAI's API does. A lone surrogate
escape (``"\\ud800"``), which no tokenizer takes, is a 422 naming the field, not a 500.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from subspaces.store.inputs import visible


def _valid_unicode(text: str, what: str = "the text") -> str:
    if not text.isascii():
        from subspaces.models.encoder import unicode_problem

        problem = unicode_problem(text)
        if problem is not None:
            raise ValueError(f"{what} holds {problem}")  # pydantic makes this a 422 naming the field
    return text


Text = Annotated[StrictStr, AfterValidator(_valid_unicode)]


def _visible_query(text: str) -> str:
    if not visible(text):
        raise ValueError("the query has no visible character (empty, blanks or control characters only)")
    return text


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[Text] = None


TokenId = Annotated[StrictInt, Field(ge=0)]


class EmbeddingRequest(_Request):
    """OpenAI's ``POST /v1/embeddings`` body: ``input`` is a text, a list of texts, or token ids (one list of ids,
    or a list of them), as OpenAI's spec allows; ids are read as the server's ``--token-ids`` says (docs/serve.md).
    ``prompt_name`` (ours) names one of the model's prompts (``query``, ``document``, ...)."""

    input: Union[StrictStr, list[StrictStr], list[TokenId], list[list[TokenId]]]
    dimensions: Optional[StrictInt] = None
    encoding_format: Literal["float", "base64"] = "float"
    user: Optional[Text] = None
    prompt_name: Optional[Text] = None

    @field_validator("input")
    @classmethod
    def _unicode_input(cls, value: Any) -> Any:
        # On the union, not its members: an error on a member would be reported once per member of the union.
        if isinstance(value, str):
            return _valid_unicode(value)
        for i, text in enumerate(value):
            if isinstance(text, str):
                _valid_unicode(text, f"text {i}")
        return value

    def token_ids(self) -> Optional[list[list[int]]]:
        """The inputs as lists of token ids, or None when they are texts."""
        if isinstance(self.input, str) or not self.input or isinstance(self.input[0], str):
            return None
        if isinstance(self.input[0], int):
            return [self.input]
        return self.input


class SimilarityRequest(_Request):
    """Pairs of texts; under ``condition`` their similarity is the Hyper-CL head's (``--head``)."""

    pairs: list[tuple[Text, Text]] = Field(min_length=1)
    condition: Optional[Text] = None
    dimensions: Optional[StrictInt] = None
    prompt_name: Optional[Text] = None


class SearchRequest(_Request):
    """The ``k`` nearest store rows to ``query``, ranked at ``dimensions`` (the store's funnel)."""

    query: Annotated[Text, AfterValidator(_visible_query)]
    k: StrictInt = Field(default=10, ge=1, le=1000)
    dimensions: Optional[StrictInt] = None
    condition: Optional[Text] = None
    basis: Optional[Literal["model", "pca"]] = Field(
        default=None,
        description="whose first `dimensions` axes the shortlist reads: the model's own coordinates, or the store's "
        "principal axes (default: the model's for a Matryoshka-trained model, else the principal axes)",
    )
    prompt_name: Optional[Text] = Field(
        default=None, description="default: the model's default prompt, as the store's own search"
    )


# --- responses ------------------------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, tokens: int) -> Usage:
        return cls(prompt_tokens=tokens, total_tokens=tokens)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str] = Field(description="floats, or base64 of little-endian float32 bytes")


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class Similarity(BaseModel):
    object: Literal["similarity"] = "similarity"
    index: int
    score: float


class SimilarityResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Similarity]
    model: str
    condition: Optional[str] = None
    usage: Usage


class SearchResult(BaseModel):
    object: Literal["search_result"] = "search_result"
    rank: int
    id: str
    score: float
    text: Optional[str] = None


class SearchResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[SearchResult]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "subspaces"
    dimensions: int
    backend: str
    precision: str
    dtype: Literal["float32", "bfloat16"] = Field(description="what the torch backend runs the model in")
    search: bool = Field(description="whether this server has a store (/v1/search)")
    conditions: bool = Field(description="whether this server has a condition head")
    dimensions_basis: Optional[Literal["model", "adapter", "pca"]] = Field(
        description="what `dimensions` reads: the model's own prefix (Matryoshka-trained), a fitted adapter's, "
        "the store's principal axes; null: `dimensions` below the full size is refused"
    )
    prompts: dict[str, str] = Field(description="the prompts `prompt_name` may name")
    default_prompt_name: Optional[str] = None
    aliases: list[str] = Field(description="every name requests may give as `model`")
    accepts_any_model_name: bool


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "loading", "failed"]
    model: Optional[str] = None
    backend: Optional[str] = None
    error: Optional[str] = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: int


class ErrorResponse(BaseModel):
    error: ErrorDetail
