"""NeMo 1's fine-tuning settings as transformer keys: the ``model.peft`` block of its SFT and
PEFT configs (NeMo's ``megatron_gpt_finetuning_config.yaml``, NeMo-Framework-Launcher's
``conf/peft/`` and ``conf/fine_tuning/``), and the interpolations those configs point into
their own data block with.

* ``peft.peft_scheme``: ``lora`` gives ``lora_rank`` (``peft.lora_tuning.adapter_dim``,
  NeMo's default 32) and ``lora_targets`` (``peft.lora_tuning.target_modules``, NeMo's
  default ``attention_qkv`` alone; ``attention``, ``mlp`` and ``all`` name several:
  ``get_target_modules`` in NeMo r2.0.0rc1's ``nemo/collections/nlp/parts/peft_config.py``);
  ``none`` or null trains every weight; any other scheme (adapters, IA3, p-tuning, QLoRA,
  several at once) is refused: priced as full training it would be wrong by a third.
  Adapters on some layers only (``layer_selection``) and the ``canonical`` variant (separate
  Q, K and V adapters) are named in a warning and priced as NeMo's fused adapter on every
  layer.
* ``data.train_ds.packed_sequence``: packed documents, whose length is the data's: named in a
  warning unless ``document_tokens`` is given beside ``config``.
* an interpolation such as the launcher's ``encoder_seq_length:
  ${peft.model.data.train_ds.max_seq_length}`` is read from the key it names (its first part
  dropped when it is the launcher's stage, not a block of the config).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import FlowsimWarning, config_error
from .imported import lora_keys
from .transformer_choices import LORA_TARGETS

#: NeMo 1's LoRA target names -> the layers they adapt (``LORA_CONFIG_TO_MCORE_MAP`` and
#: ``get_target_modules``)
TARGETS: dict[str, tuple[str, ...]] = {
    "attention_qkv": ("linear_qkv",), "attention_dense": ("linear_proj",),
    "mlp_fc1": ("linear_fc1",), "mlp_fc2": ("linear_fc2",),
    "attention": ("linear_qkv", "linear_proj"), "mlp": ("linear_fc1", "linear_fc2"),
    "all": LORA_TARGETS}
#: NeMo's LoRA defaults (``lora_tuning``)
DEFAULT_RANK = 32
DEFAULT_TARGETS = ("attention_qkv",)

#: a whole-value interpolation: ``${a.b.c}``
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def resolve(config: Mapping[str, Any], value: Any) -> Any:
    """``value``, or what the key its interpolation names holds in ``config`` (None when it
    names none: NeMo's default then applies)."""
    if not isinstance(value, str) or "${" not in value:
        return value
    match = _REFERENCE.match(value)
    if match is None:
        return None
    parts = match.group(1).split(".")
    if parts[0] not in config and len(parts) > 1:   # the launcher's stage (``peft.model...``)
        parts = parts[1:]
    node: Any = config
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if isinstance(node, str) and "${" in node else node


def peft_keys(model: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The LoRA keys ``model.peft`` sets (none without a PEFT scheme); adapters on some
    layers only, or NeMo's canonical variant, named in a warning.

    Raises
    ------
    ConfigError
        A PEFT scheme other than LoRA, a LoRA rank that is not a positive integer, or a
        target NeMo does not name.
    """
    peft = model.get("peft") or {}
    if not isinstance(peft, Mapping):
        raise config_error(where, "model.peft", "a mapping (peft_scheme, lora_tuning)", peft)
    keys: dict[str, Any] = {}
    scheme = str(peft.get("peft_scheme") or "none").lower()
    if scheme not in ("none", "lora"):
        raise config_error(where, "model.peft.peft_scheme",
                           "lora or none (other PEFT schemes are not modelled)", scheme)
    if scheme == "lora":
        tuning = peft.get("lora_tuning") or {}
        if not isinstance(tuning, Mapping):
            raise config_error(where, "model.peft.lora_tuning",
                               "a mapping (adapter_dim, target_modules)", tuning)
        keys = lora_keys(tuning.get("adapter_dim", DEFAULT_RANK),
                         tuning.get("target_modules", DEFAULT_TARGETS), where,
                         rank_key="model.peft.lora_tuning.adapter_dim",
                         names_key="model.peft.lora_tuning.target_modules", layers=TARGETS)
        left = [f"model.peft.lora_tuning.{key} {tuning[key]}" for key in ("layer_selection",)
                if tuning.get(key)]
        if str(tuning.get("variant", "nemo")) != "nemo":
            left.append(f"model.peft.lora_tuning.variant {tuning['variant']}")
        if left:
            warnings.warn(f"{where}: not modelled: {', '.join(left)} (priced as NeMo's fused "
                          "adapter on every layer)", FlowsimWarning, stacklevel=5)
    return keys


def packed(model: Mapping[str, Any]) -> bool:
    """Whether the training data is packed sequences (``data.train_ds.packed_sequence``)."""
    data = model.get("data")
    train = data.get("train_ds") if isinstance(data, Mapping) else None
    return isinstance(train, Mapping) and train.get("packed_sequence") is True
