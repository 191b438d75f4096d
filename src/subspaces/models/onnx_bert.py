"""Turn an exported BERT ONNX graph back into a trainable ``transformers`` BertModel folder.

sentence-transformers' ONNX exports keep the names of most initializers (``model.0.auto_model.<bert name>``)
but store each linear layer's weight as an anonymous ``onnx::MatMul_N`` tensor of shape (in, out). Each such
MatMul feeds an ``Add`` with the named bias, so the bias name says which BERT weight the MatMul holds. The tests
check the converted folder token by token against onnxruntime on the same inputs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from subspaces.errors import ModelNotFoundError
from subspaces.state_folder import built_folder

ST_PREFIX = "model.0.auto_model."  # how sentence-transformers' exporter names the BERT inside module 0


@dataclass(frozen=True)
class OnnxBertWeights:
    """BERT weights read out of an ONNX graph, under their ``transformers`` names, with the config they imply."""

    state_dict: dict[str, np.ndarray]
    num_layers: int
    num_heads: int
    layer_norm_eps: float
    token_output: str  # name of the graph output that holds the last hidden states


def read_onnx_bert(onnx_path: str | os.PathLike[str]) -> OnnxBertWeights:
    """Map every initializer of a BERT ONNX export to its BertModel parameter name."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    tensors = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    state: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        if name.startswith(ST_PREFIX):
            state[name[len(ST_PREFIX) :]] = value
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in tensors or node.input[1].startswith(ST_PREFIX):
            continue
        adds = [n for n in consumers.get(node.output[0], []) if n.op_type == "Add"]
        biases = [i for n in adds for i in n.input if i.startswith(ST_PREFIX) and i.endswith(".bias")]
        if len(biases) != 1:
            raise ModelNotFoundError(f"{onnx_path}: cannot tell which weight MatMul {node.input[1]!r} holds")
        # ONNX MatMul computes x @ W with W (in, out); torch.nn.Linear stores (out, in).
        state[biases[0][len(ST_PREFIX) : -len(".bias")] + ".weight"] = tensors[node.input[1]].T.copy()

    layers = {int(k.split(".")[2]) for k in state if k.startswith("encoder.layer.")}
    eps = next(
        (a.f for n in graph.node if n.op_type == "LayerNormalization" for a in n.attribute if a.name == "epsilon"),
        1e-12,
    )
    head_dim = _attention_head_dim(graph)
    hidden = state["embeddings.word_embeddings.weight"].shape[1]
    # The last LayerNormalization's output is the token-level output (what the pooling consumes).
    last_norm = [n for n in graph.node if n.op_type == "LayerNormalization"][-1].output[0]
    return OnnxBertWeights(state, len(layers), hidden // head_dim, float(eps), last_norm)


def _attention_head_dim(graph) -> int:
    """Attention scores are divided by sqrt(head_dim); read that scalar constant from the first layer."""
    from onnx import numpy_helper

    producers = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type == "Div" and "attention/self" in node.name:
            scale = producers.get(node.input[1])
            if scale is not None and scale.op_type == "Constant":
                value = float(numpy_helper.to_array(scale.attribute[0].t))
                return int(round(value * value))
    raise ModelNotFoundError("cannot find the attention scale in the ONNX graph")


def convert_onnx_bert(
    onnx_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    tokenizer_dir: str | os.PathLike[str],
    max_seq_length: int = 128,
    pooling_mode: str = "mean",
    normalize: bool = False,
) -> Path:
    """Write a sentence-transformers folder (BertModel + pooling) holding the ONNX graph's weights (built in a
    temporary sibling and renamed into place)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    weights = read_onnx_bert(onnx_path)
    sd = weights.state_dict
    vocab, hidden = sd["embeddings.word_embeddings.weight"].shape
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=weights.num_layers,
        num_attention_heads=weights.num_heads,
        intermediate_size=sd["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=sd["embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=sd["embeddings.token_type_embeddings.weight"].shape[0],
        layer_norm_eps=weights.layer_norm_eps,
        hidden_act="gelu",  # the graph computes exact GELU through Erf
    )
    bert = BertModel(config, add_pooling_layer=False)
    missing, unexpected = bert.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, strict=False)
    # position_ids/token_type_ids are buffers, not weights; anything else missing means a bad mapping.
    missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise ModelNotFoundError(f"{onnx_path}: weights do not fit BERT (missing {missing}, unexpected {unexpected})")

    target = Path(output_dir)
    with built_folder(target) as build:
        hf_dir = build.parent / "hf"
        bert.save_pretrained(hf_dir)
        BertTokenizerFast.from_pretrained(str(tokenizer_dir)).save_pretrained(hf_dir)
        transformer = Transformer(str(hf_dir), max_seq_length=max_seq_length)
        # BERT's pooler, which the graph lacks and mean pooling never reads, is created with random weights: zero it,
        # or every conversion would be another model to the weights fingerprint (a store's model check).
        for name, param in transformer.auto_model.named_parameters():
            if name.startswith("pooler."):
                param.data.zero_()
        modules = [transformer, Pooling(hidden, pooling_mode=pooling_mode)]
        if normalize:
            modules.append(Normalize())
        model = SentenceTransformer(modules=modules, device="cpu")
        model.model_card_data.local_files_only = True  # saving it looks nothing up on the hub
        model.save(str(build))
    return target
