"""A reference BERT encoder built from PyTorch's own layers, to check attncore's against.

``nn.Embedding``, ``nn.LayerNorm`` and ``nn.TransformerEncoderLayer`` (post-LN, exact GELU)
loaded with a checkpoint's weights exactly as stored, in ``nn.Linear``'s ``(out, in)`` layout:
no attncore code and no attncore conversion is involved, so agreement checks both the forward
pass and the weight conversion. It imports in about a second (with torch), where
``transformers`` takes ten or more. attncore agrees, layer by layer, with
``transformers.BertModel`` and ``sentence_transformers`` as well.

The names map as follows (``encoder.layer.{i}.`` prefix omitted):

==============================================  ==========================================
checkpoint (transformers' BertModel)            ``nn.TransformerEncoderLayer``
==============================================  ==========================================
``attention.self.{query,key,value}.weight``     ``self_attn.in_proj_weight`` (stacked rows)
``attention.self.{query,key,value}.bias``       ``self_attn.in_proj_bias``
``attention.output.dense``                      ``self_attn.out_proj``
``attention.output.LayerNorm``                  ``norm1``
``intermediate.dense``                          ``linear1``
``output.dense``                                ``linear2``
``output.LayerNorm``                            ``norm2``
==============================================  ==========================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["TorchBertReference"]


class TorchBertReference:
    """The encoder of a BERT checkpoint as PyTorch modules (CPU, float32, eval mode).

    Build it with :meth:`from_dir`; run it with :meth:`hidden_states` and
    :meth:`sentence_embeddings` on the integer ``(batch, n)`` inputs of a tokenized batch.
    """

    def __init__(self, modules: Any, eps: float) -> None:
        self.modules = modules
        self.eps = eps

    @classmethod
    def from_dir(cls, model_dir: str | Path | None = None) -> "TorchBertReference":
        """Read ``config.json`` and ``model.safetensors`` (default: the installed MiniLM)."""
        import json

        import torch
        from safetensors.torch import load_file
        from torch import nn

        from ..pretrained.checkpoint import default_model_dir

        path = default_model_dir() if model_dir is None else Path(model_dir)
        cfg = json.loads((path / "config.json").read_text())
        state = load_file(str(path / "model.safetensors"))
        d, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        emb = nn.ModuleDict({
            "word": nn.Embedding.from_pretrained(state["embeddings.word_embeddings.weight"]),
            "position": nn.Embedding.from_pretrained(
                state["embeddings.position_embeddings.weight"]),
            "token_type": nn.Embedding.from_pretrained(
                state["embeddings.token_type_embeddings.weight"]),
            "norm": nn.LayerNorm(d, eps=eps)})
        layers = nn.ModuleList()
        with torch.no_grad():
            emb["norm"].weight.copy_(state["embeddings.LayerNorm.weight"])
            emb["norm"].bias.copy_(state["embeddings.LayerNorm.bias"])
            for i in range(cfg["num_hidden_layers"]):
                s = {k[len(f"encoder.layer.{i}."):]: v for k, v in state.items()
                     if k.startswith(f"encoder.layer.{i}.")}
                layer = nn.TransformerEncoderLayer(
                    d, cfg["num_attention_heads"], dim_feedforward=cfg["intermediate_size"],
                    dropout=0.0, activation="gelu", layer_norm_eps=eps, batch_first=True,
                    norm_first=False)
                att = layer.self_attn
                att.in_proj_weight.copy_(torch.cat([s[f"attention.self.{n}.weight"]
                                                    for n in ("query", "key", "value")]))
                att.in_proj_bias.copy_(torch.cat([s[f"attention.self.{n}.bias"]
                                                  for n in ("query", "key", "value")]))
                pairs = [(att.out_proj, "attention.output.dense"),
                         (layer.norm1, "attention.output.LayerNorm"),
                         (layer.linear1, "intermediate.dense"),
                         (layer.linear2, "output.dense"), (layer.norm2, "output.LayerNorm")]
                for module, name in pairs:
                    module.weight.copy_(s[name + ".weight"])
                    module.bias.copy_(s[name + ".bias"])
                layers.append(layer)
        modules = nn.ModuleDict({"embeddings": emb, "layers": layers}).eval()
        return cls(modules, eps)

    def hidden_states(self, input_ids: Any, token_type_ids: Any, attention_mask: Any
                      ) -> list[Any]:
        """Embedding output and each layer's output, ``num_layers + 1`` float32 tensors
        ``(batch, n, d)``. The inputs are integer/boolean ``(batch, n)`` arrays or tensors;
        ``attention_mask`` is True (or 1) at real tokens. Rows at padding positions are not
        meaningful (PyTorch may fill them differently) and should not be compared."""
        import torch

        ids, types = torch.as_tensor(input_ids), torch.as_tensor(token_type_ids)
        real = torch.as_tensor(attention_mask).bool()
        emb = self.modules["embeddings"]
        positions = torch.arange(ids.shape[1])[None, :]
        with torch.no_grad():
            x = emb["word"](ids) + emb["token_type"](types) + emb["position"](positions)
            x = emb["norm"](x)
            states = [x]
            for layer in self.modules["layers"]:
                # PyTorch's key-padding mask means "ignore": True at padding.
                x = layer(x, src_key_padding_mask=~real)
                states.append(x)
        return states

    def sentence_embeddings(self, input_ids: Any, token_type_ids: Any,
                            attention_mask: Any) -> Any:
        """Mean of the last layer over real tokens, then unit length: ``(batch, d)``; the
        pooling of the model card of all-MiniLM-L6-v2 (sum of masked token vectors divided
        by the number of real tokens, clamped at 1e-9), then ``F.normalize``."""
        import torch
        import torch.nn.functional as F

        last = self.hidden_states(input_ids, token_type_ids, attention_mask)[-1]
        mask = torch.as_tensor(attention_mask).to(last.dtype)[..., None].expand(last.shape)
        pooled = (last * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)
