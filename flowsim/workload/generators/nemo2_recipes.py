"""NeMo 2's pre-training recipes, as their source sets them: the table ``generator: nemo2``
reads (:mod:`.nemo2`).

Transcribed from NVIDIA/NeMo at :data:`COMMIT`: each recipe's ``nemo/collections/llm/recipes/
<name>.py`` (``trainer()``'s parallel sizes, ``pretrain_recipe()``'s ``MockDataModule`` batch
and sequence, ``pretrain_performance_optimizations()``), the model config class its
``model()`` builds, resolved through its parents in ``nemo/collections/llm/gpt/model/``
(``llama.py``, ``mistral.py``, ``mixtral.py``, ``nemotron.py``, ``base.py``), and Megatron-Core's
defaults where none of them sets a field (GPT-3 175B's GeLU MLP and query groups, Nemotron's
ungated MLP, Nemotron-3 8B's and 22B's query groups, ``None`` there). Every recipe's DDP config but
Qwen's (which gives none: Megatron-Core's defaults) overlaps the gradient reduction and the
parameter gathers and reduces in FP32, and its Adam is
Megatron-Core's distributed optimizer; the mixed-precision plugin's ``grad_reduce_in_fp32`` is
what the DDP config ends up with (``MegatronStrategy.connect``). Performance mode adds
``MegatronCommOverlapCallback``: with data parallelism, 128 MiB buckets and, with interleaving,
aligned parameter gathers; tensor-parallel overlap where the recipe asks for it (NeMo turns it
off without sequence parallelism or below TP 2), with NeMo's userbuffers settings when the
recipe names one, else Transformer Engine's.

The long-context recipes (``_16k``, ``_64k``, ``_128k``) build their base recipe's model with a
longer ``seq_length`` and set their own parallel sizes and data; only Mixtral 8x22B 64k's
takes ``performance_mode``. Llama 3.2's configs tie the output layer to the embedding
(``share_embeddings_and_output_weights``). The vocabulary is the model family's tokenizer
(Hugging Face ``config.json``: Llama 3, 3.1 and 3.2 128,256, Llama 2, Mistral 7B v0.1 and
Mixtral 8x7B 32,000, Mixtral 8x22B 32,768, Nemotron-3 and Nemotron-4 256,000 (NeMo's
``scripts/performance/llm`` price Nemotron-3 8B and 22B with a 256,000 ``NullTokenizer``),
Qwen 2 and 2.5 their configs' 151,936 or 152,064, GPT-3 GPT-2's BPE 50,257), as training
on the model's data uses it: the recipes' mock data itself builds GPT-2's tokenizer whatever
the model (``pretrain()`` takes the data's tokenizer), so a run on it is priced with
``vocab: 50257``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: the NeMo commit the table was read from
COMMIT = "8cfedd7203462cb251a914e700e5605444277561"
#: the communication-overlap callback's DDP bucket with data parallelism (128 Mi parameters)
BUCKET_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True)
class Recipe:
    """One pre-training recipe: its model config (NeMo 2's field names), parallel sizes
    (``trainer.strategy``), batch (``data``), the MLP, embeddings and vocabulary, and what
    performance mode changes."""

    model: MappingProxyType
    strategy: MappingProxyType
    data: MappingProxyType
    activation: str = "fast-swiglu"
    tied_embeddings: bool = False
    position_embedding: str = "rope"
    vocab: int = 0
    #: the embedding and the loss count as a layer each when the layers are split over the
    #: pipeline stages (``account_for_embedding_in_pipeline_split`` and ``..._loss_...``)
    embedding_and_loss_in_split: bool = False
    #: performance mode: ``None`` when the recipe has none
    performance: MappingProxyType | None = field(default=None)
    #: keyword arguments of its ``pretrain_recipe`` that set the layout (:data:`FACTORY_PATHS`)
    factory_arguments: tuple[str, ...] = ()
    #: its DDP config overlaps the gradient reduction and the parameter gathers (the Qwen
    #: recipes give their strategy none: Megatron-Core's defaults, neither)
    ddp_overlap: bool = True


def _recipe(layers: int, hidden: int, ffn: int, heads: int, groups: int | None, seq: int,
            tp: int, pp: int, vpp: int | None, cp: int, sp: bool, batch: int, micro: int,
            vocab: int, *, ep: int = 1, perf: dict[str, Any] | None = None,
            model: dict[str, Any] | None = None, **kwargs: Any) -> Recipe:
    config = {"num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": ffn,
              "num_attention_heads": heads, "num_query_groups": groups or heads,
              **(model or {})}
    strategy = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
                "virtual_pipeline_model_parallel_size": vpp, "context_parallel_size": cp,
                "expert_model_parallel_size": ep, "sequence_parallel": sp}
    data = {"seq_length": seq, "global_batch_size": batch, "micro_batch_size": micro}
    return Recipe(MappingProxyType(config), MappingProxyType(strategy), MappingProxyType(data),
                  vocab=vocab, performance=None if perf is None else MappingProxyType(perf),
                  **kwargs)


def _perf(tp_comm_overlap: bool, named_ub: bool = False, grad_bf16: bool = True,
          **strategy: Any) -> dict[str, Any]:
    """Performance mode: tensor-parallel overlap (with NeMo's named userbuffers settings or
    Transformer Engine's), gradients reduced in BF16, parallel sizes it changes."""
    return {"tp_comm_overlap": tp_comm_overlap, "named_ub": named_ub, "grad_bf16": grad_bf16,
            "strategy": strategy}


#: ``pretrain_recipe`` keywords of the Nemotron recipes -> the config path each sets
FACTORY_PATHS = MappingProxyType({
    "tensor_parallelism": "trainer.strategy.tensor_model_parallel_size",
    "pipeline_parallelism": "trainer.strategy.pipeline_model_parallel_size",
    "virtual_pipeline_parallelism": "trainer.strategy.virtual_pipeline_model_parallel_size",
    "context_parallelism": "trainer.strategy.context_parallel_size",
    "sequence_parallelism": "trainer.strategy.sequence_parallel",
    "global_batch_size": "data.global_batch_size", "micro_batch_size": "data.micro_batch_size",
    "seq_length": "data.seq_length", "precision": "trainer.plugins"})
_LLAMA3 = 128256
_MOE = {"num_moe_experts": 8, "moe_router_topk": 2}
#: recipe name (``nemo llm pretrain --factory NAME``) -> its settings
RECIPES: MappingProxyType = MappingProxyType({
    "llama3_8b": _recipe(32, 4096, 14336, 32, 8, 8192, 1, 1, None, 2, False, 512, 1, _LLAMA3,
                         perf=_perf(False)),
    "llama3_70b": _recipe(80, 8192, 28672, 64, 8, 8192, 4, 4, 5, 2, True, 512, 1, _LLAMA3,
                          perf=_perf(True, named_ub=True)),
    "llama31_8b": _recipe(32, 4096, 14336, 32, 8, 8192, 1, 1, None, 2, False, 512, 1, _LLAMA3,
                          perf=_perf(True, named_ub=True, grad_bf16=False)),
    "llama31_70b": _recipe(80, 8192, 28672, 64, 8, 8192, 4, 4, 5, 2, True, 512, 1, _LLAMA3,
                           perf=_perf(True, named_ub=True, grad_bf16=False)),
    "llama31_405b": _recipe(126, 16384, 53248, 128, 8, 8192, 8, 8, 2, 4, True, 512, 1, _LLAMA3,
                            perf=_perf(True, named_ub=True), embedding_and_loss_in_split=True),
    "llama2_7b": _recipe(32, 4096, 11008, 32, 32, 4096, 2, 1, None, 1, False, 512, 1, 32000,
                         perf=_perf(False, grad_bf16=False)),
    "mistral_7b": _recipe(32, 4096, 14336, 32, 8, 4096, 1, 1, None, 2, False, 512, 1, 32000,
                          model={"window_size": (4096, 0), "cp_comm_type": "a2a"}),
    "mixtral_8x7b": _recipe(32, 4096, 14336, 32, 8, 4096, 1, 4, 8, 1, False, 512, 1, 32000,
                            ep=8, model=_MOE,
                            perf=_perf(False, tensor_model_parallel_size=8,
                                       expert_model_parallel_size=1, sequence_parallel=True)),
    "mixtral_8x22b": _recipe(56, 6144, 16384, 48, 8, 4096, 2, 4, 14, 2, True, 512, 1, 32768,
                             ep=8, model=_MOE,
                             perf=_perf(False, tensor_model_parallel_size=8,
                                        expert_model_parallel_size=1, sequence_parallel=True)),
    "nemotron4_15b": _recipe(32, 6144, 24576, 48, 8, 4096, 4, 1, None, 1, True, 32, 2, 256000,
                             activation="squared-relu", perf=_perf(True),
                             factory_arguments=tuple(FACTORY_PATHS)),
    "nemotron4_340b": _recipe(96, 18432, 73728, 96, 8, 4096, 8, 12, 8, 2, True, 2304, 1, 256000,
                              activation="squared-relu", perf=_perf(True),
                              factory_arguments=tuple(FACTORY_PATHS)),
    "gpt3_175b": _recipe(96, 12288, 49152, 96, None, 2048, 4, 8, 6, 1, True, 2048, 2, 50257,
                         activation="gelu", tied_embeddings=True,
                         position_embedding="learned_absolute",
                         perf=_perf(True, named_ub=True)),
    # long context: the base model, the recipe's own trainer() and data, no performance mode
    "llama3_8b_16k": _recipe(32, 4096, 14336, 32, 8, 16384, 4, 2, None, 2, True, 512, 1,
                             _LLAMA3),
    "llama3_8b_64k": _recipe(32, 4096, 14336, 32, 8, 65536, 4, 2, None, 4, True, 512, 1,
                             _LLAMA3),
    "llama3_8b_128k": _recipe(32, 4096, 14336, 32, 8, 131072, 4, 2, None, 8, True, 512, 1,
                              _LLAMA3),
    "llama3_70b_16k": _recipe(80, 8192, 28672, 64, 8, 16384, 8, 2, None, 2, True, 512, 1,
                              _LLAMA3),
    "llama3_70b_64k": _recipe(80, 8192, 28672, 64, 8, 65536, 8, 4, None, 8, True, 512, 1,
                              _LLAMA3),
    "nemotron4_15b_16k": _recipe(32, 6144, 24576, 48, 8, 16384, 2, 2, None, 2, True, 32, 2,
                                 256000, activation="squared-relu",
                                 factory_arguments=tuple(FACTORY_PATHS)),
    "nemotron4_15b_64k": _recipe(32, 6144, 24576, 48, 8, 65536, 4, 2, None, 4, True, 32, 2,
                                 256000, activation="squared-relu",
                                 factory_arguments=tuple(FACTORY_PATHS)),
    "mixtral_8x7b_16k": _recipe(32, 4096, 14336, 32, 8, 16384, 4, 2, None, 4, True, 512, 1,
                                32000, model=_MOE),
    "mixtral_8x7b_64k": _recipe(32, 4096, 14336, 32, 8, 65536, 8, 4, None, 4, True, 512, 1,
                                32000, model=_MOE),
    # its performance mode leaves the plugin's FP32 reduction (unlike mixtral_8x22b's)
    "mixtral_8x22b_64k": _recipe(56, 6144, 16384, 48, 8, 65536, 2, 4, 14, 2, True, 512, 1,
                                 32768, ep=8, model=_MOE,
                                 perf=_perf(False, grad_bf16=False, tensor_model_parallel_size=8,
                                            expert_model_parallel_size=1,
                                            sequence_parallel=True)),
    "llama32_1b": _recipe(16, 2048, 8192, 32, 8, 8192, 1, 1, None, 1, False, 512, 1, _LLAMA3,
                          tied_embeddings=True),
    "llama32_3b": _recipe(28, 3072, 8192, 24, 8, 8192, 1, 1, None, 1, False, 512, 1, _LLAMA3,
                          tied_embeddings=True),
    # Nemotron-3: NemotronConfig's squared-ReLU MLP; 8B and 22B multi-head (no query groups);
    # performance mode asks for TP overlap, which NeMo drops: the recipes have no SP
    "nemotron3_4b": _recipe(32, 3072, 9216, 24, 8, 4096, 2, 1, None, 1, False, 32, 2, 256000,
                            activation="squared-relu", factory_arguments=tuple(FACTORY_PATHS)),
    "nemotron3_8b": _recipe(32, 4096, 16384, 32, None, 4096, 2, 1, None, 1, False, 32, 2,
                            256000, activation="squared-relu", perf=_perf(True),
                            factory_arguments=tuple(FACTORY_PATHS)),
    "nemotron3_22b": _recipe(40, 6144, 24576, 48, None, 4096, 2, 4, 10, 1, False, 32, 1,
                             256000, activation="squared-relu", perf=_perf(True),
                             factory_arguments=tuple(FACTORY_PATHS)),
    # Qwen 2 and 2.5 (``qwen2_trainer``: no DDP config, so no overlap; QKV biases left out);
    # vocabularies as their configs set them
    **{name: _recipe(layers, hidden, ffn, heads, groups, 4096, tp, pp, None, 1, False, 32, 2,
                     vocab, ddp_overlap=False, factory_arguments=tuple(FACTORY_PATHS))
       for name, (layers, hidden, ffn, heads, groups, tp, pp, vocab) in {
           "qwen2_500m": (24, 896, 4864, 14, 2, 1, 1, 151936),
           "qwen25_500m": (24, 896, 4864, 14, 2, 1, 1, 151936),
           "qwen2_1p5b": (28, 1536, 8960, 12, 2, 1, 1, 151936),
           "qwen25_1p5b": (28, 1536, 8960, 12, 2, 1, 1, 151936),
           "qwen2_7b": (28, 3584, 18944, 28, 4, 2, 1, 152064),
           "qwen25_7b": (28, 3584, 18944, 28, 4, 2, 1, 152064),
           "qwen25_14b": (48, 5120, 13824, 40, 8, 4, 1, 152064),
           "qwen25_32b": (64, 5120, 27648, 40, 8, 8, 2, 152064),
           "qwen2_72b": (80, 8192, 29568, 64, 8, 8, 4, 152064),
           "qwen25_72b": (80, 8192, 29568, 64, 8, 8, 4, 152064)}.items()},
})

#: NeMo's precision factories (``recipes/precision/mixed_precision.py``) -> plugin settings
_FP8 = {"fp8": "hybrid", "fp8_param_gather": True}
PLUGINS: dict[str, dict[str, Any]] = {
    "bf16_mixed": {"precision": "bf16-mixed"}, "fp16_mixed": {"precision": "16-mixed"},
    "bf16_with_fp8_mixed": {"precision": "bf16-mixed", **_FP8},
    "fp16_with_fp8_mixed": {"precision": "16-mixed", **_FP8},
    "bf16_with_mxfp8_mixed": {"precision": "bf16-mixed", **_FP8, "fp8_recipe": "mxfp8"},
    "fp16_with_mxfp8_mixed": {"precision": "16-mixed", **_FP8, "fp8_recipe": "mxfp8"},
    "bf16_with_fp8_current_scaling_mixed": {"precision": "bf16-mixed", **_FP8,
                                            "fp8_recipe": "tensorwise"},
    "bf16_with_fp8_subchannel_scaling_mixed": {"precision": "bf16-mixed", **_FP8,
                                               "fp8_recipe": "blockwise"},
    # Megatron-Bridge's NVFP4 factory as of its 26.04 table (74695a06d: fp4 e2m1 under
    # NVFP4BlockScaling, fp8_param_gather False; ecbd4ead5, days later, gathers in FP4)
    "bf16_with_nvfp4_mixed": {"precision": "bf16-mixed", "fp8": "hybrid",
                              "fp8_param_gather": False, "fp8_recipe": "nvfp4"}}
#: ``trainer.plugins.precision`` values Lightning takes for Megatron's mixed precision
PRECISIONS = ("bf16-mixed", "bf16", "16-mixed", "16", "32", "32-true")
