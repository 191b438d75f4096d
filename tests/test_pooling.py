import pytest
import torch

from subspaces.models.pooling import POOLERS, SimCSEPooling, pool

# Two sequences, three positions, hidden size 2; the second sequence has one padding position.
LAYERS = [
    torch.tensor([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]),  # embeddings
    torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [[1.0, 1.0], [3.0, 3.0], [100.0, 100.0]]]),  # layer 1
    torch.tensor([[[2.0, 0.0], [4.0, 0.0], [6.0, 0.0]], [[0.0, 2.0], [0.0, 4.0], [100.0, 100.0]]]),  # layer 2
    torch.tensor([[[1.0, 1.0], [1.0, 1.0], [4.0, 4.0]], [[2.0, 2.0], [4.0, 4.0], [100.0, 100.0]]]),  # layer 3 (last)
]
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_cls_takes_first_token():
    assert torch.equal(pool("cls_before_pooler", LAYERS[-1], MASK), torch.tensor([[1.0, 1.0], [2.0, 2.0]]))


def test_mean_ignores_padding():
    assert torch.allclose(pool("mean", LAYERS[-1], MASK), torch.tensor([[2.0, 2.0], [3.0, 3.0]]))


def test_avg_first_last_uses_first_transformer_layer_not_embeddings():
    # (layer1 + layer3)/2 averaged over real tokens.
    expected = torch.tensor(
        [[(1 + 3 + 5 + 1 + 1 + 4) / 6, (2 + 4 + 6 + 1 + 1 + 4) / 6], [(1 + 3 + 2 + 4) / 4, (1 + 3 + 2 + 4) / 4]]
    )
    assert torch.allclose(pool("avg_first_last", LAYERS[-1], MASK, LAYERS), expected)


def test_avg_top2_uses_last_two_layers():
    expected = torch.tensor(
        [[(2 + 4 + 6 + 1 + 1 + 4) / 6, (0 + 0 + 0 + 1 + 1 + 4) / 6], [(0 + 0 + 2 + 4) / 4, (2 + 4 + 2 + 4) / 4]]
    )
    assert torch.allclose(pool("avg_top2", LAYERS[-1], MASK, LAYERS), expected)


def test_layer_poolers_need_hidden_states():
    with pytest.raises(ValueError, match="hidden states"):
        pool("avg_top2", LAYERS[-1], MASK)


def test_cls_mlp_only_in_training():
    module = SimCSEPooling(2, pooler="cls", mlp_only_train=True)
    features = {"token_embeddings": LAYERS[-1], "attention_mask": MASK}
    module.train()
    trained = module(dict(features))["sentence_embedding"]
    module.eval()
    evaluated = module(dict(features))["sentence_embedding"]
    assert torch.equal(evaluated, LAYERS[-1][:, 0])
    assert torch.allclose(trained, module.mlp(LAYERS[-1][:, 0]))


def test_cls_mlp_kept_at_test_time_when_asked():
    module = SimCSEPooling(2, pooler="cls", mlp_only_train=False).eval()
    out = module({"token_embeddings": LAYERS[-1], "attention_mask": MASK})["sentence_embedding"]
    assert torch.allclose(out, module.mlp(LAYERS[-1][:, 0]))


def test_unknown_pooler():
    with pytest.raises(ValueError, match="unknown pooler"):
        SimCSEPooling(2, pooler="max")
    assert set(POOLERS) == {"cls", "cls_before_pooler", "mean", "avg_first_last", "avg_top2"}


def test_cli_pooler_choices_are_the_library_poolers():
    import inspect
    import typing

    from subspaces.cli.core import encode_cmd

    option = inspect.signature(encode_cmd, eval_str=True).parameters["pooler"].annotation
    choices = typing.get_args(typing.get_args(option)[0])[0]  # Annotated[Optional[Literal[...]], ...]
    assert typing.get_args(choices) == POOLERS
