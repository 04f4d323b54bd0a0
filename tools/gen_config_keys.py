#!/usr/bin/env python3
"""Every config.json key transformers knows for each architecture headprune supports.

Writes tests/fixtures/config-keys.json: per model_type (gpt2, bert, llama,
mistral, qwen2, qwen3, phi3, gpt_neox, olmo2, gemma2,
gemma3_text) the keys of its transformers 4.x configuration class, where
each comes from:

  class   a parameter of the configuration class's __init__, or a key it reads from its kwargs
  base    PretrainedConfig's: its __init__ parameters, the keys it pops from
          kwargs (torch_dtype, transformers_version, ...) and the legacy
          generation settings it still reads
  alias   a key of the class's attribute_map (GPT-2's hidden_size -> n_embd)
  saved   written by save_pretrained for a default config (to_dict)
  read    an attribute the modeling code reads: config.X or
          getattr(config, "X") in modeling_<arch>.py, and for the rotary
          models in modeling_rope_utils.py

tests/test_model.c checks that the engine's table of known keys
(engine/model/config_keys.c) decides every one of them, so a key a new transformers
release adds shows up as a failing test once this fixture is regenerated:

    /work/venv/bin/python tools/gen_config_keys.py

Deterministic; needs only transformers (no torch computation).
"""
import inspect
import json
import os
import re

import transformers
from transformers import (BertConfig, Gemma2Config, Gemma3TextConfig, GPT2Config, GPTNeoXConfig, LlamaConfig,
                          Olmo2Config, MistralConfig, Phi3Config, PretrainedConfig, Qwen2Config, Qwen3Config)
from transformers import modeling_rope_utils
from transformers.models.bert import modeling_bert
from transformers.models.gpt2 import modeling_gpt2
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3
from transformers.models.phi3 import modeling_phi3
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.olmo2 import modeling_olmo2
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gemma3 import modeling_gemma3

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "config-keys.json")

ARCHS = {
    "gpt2": (GPT2Config, [modeling_gpt2]),
    "bert": (BertConfig, [modeling_bert]),
    "llama": (LlamaConfig, [modeling_llama, modeling_rope_utils]),
    "mistral": (MistralConfig, [modeling_mistral, modeling_rope_utils]),
    "qwen2": (Qwen2Config, [modeling_qwen2, modeling_rope_utils]),
    "qwen3": (Qwen3Config, [modeling_qwen3, modeling_rope_utils]),
    "phi3": (Phi3Config, [modeling_phi3, modeling_rope_utils]),
    "gpt_neox": (GPTNeoXConfig, [modeling_gpt_neox, modeling_rope_utils]),
    "olmo2": (Olmo2Config, [modeling_olmo2, modeling_rope_utils]),
    "gemma2": (Gemma2Config, [modeling_gemma2, modeling_rope_utils]),
    "gemma3_text": (Gemma3TextConfig, [modeling_gemma3, modeling_rope_utils]),
}


def params(fn):
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "kwargs", "args")]


def class_keys(cls):
    """The class's __init__ parameters and the keys it reads from kwargs (Gemma3TextConfig's
    sliding_window_pattern, which only makes layer_types)."""
    src = inspect.getsource(cls.__init__)
    return set(params(cls.__init__)) | set(re.findall(r'kwargs\.(?:pop|get)\("(\w+)"', src))


def base_keys():
    keys = set(params(PretrainedConfig.__init__))
    src = inspect.getsource(PretrainedConfig.__init__)
    keys |= set(re.findall(r'kwargs\.(?:pop|get)\("(\w+)"', src))
    keys |= set(PretrainedConfig._get_global_generation_defaults())
    return keys


def read_keys(modules):
    keys = set()
    for mod in modules:
        src = inspect.getsource(mod)
        keys |= set(re.findall(r"\bconfig\.(\w+)", src))
        keys |= set(re.findall(r'getattr\(\s*(?:self\.)?config\s*,\s*"(\w+)"', src))
    # methods, not keys
    return {k for k in keys if not k.startswith("__") and k not in ("get", "to_dict", "get_text_config")}


def main():
    base = base_keys()
    out = {"tool": "tools/gen_config_keys.py", "transformers": transformers.__version__, "architectures": {}}
    for mt, (cls, mods) in ARCHS.items():
        assert cls.model_type == mt
        src = {}
        for what, keys in (("class", class_keys(cls)), ("base", base),
                           ("alias", getattr(cls, "attribute_map", {}).keys()),
                           ("saved", cls().to_dict().keys()), ("read", read_keys(mods))):
            for k in keys:
                src.setdefault(k, set()).add(what)
        out["architectures"][mt] = [{"key": k, "from": sorted(src[k])} for k in sorted(src)]
        print(f"{mt}: {len(src)} keys ({len(params(cls.__init__))} of the class)")
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, REPO)}")


if __name__ == "__main__":
    main()
