#!/usr/bin/env python3
"""Small hand-made tokenizer.json pipelines (Split Removed, Replace of patterns longer than
a byte, ByteLevel prefix space after another pre-tokenizer, a regex that must see one word
only, StripAccents alone) and the ids
Hugging Face tokenizers gives for them: tests/fixtures/tokenizers/pipeline-cases.json.
Each covers a corner the trained fixtures do not reach.
"""
import json
from tokenizers import Tokenizer
def bpe(vocab): return {"type":"BPE","vocab":vocab,"merges":[],"unk_token":None,"byte_fallback":False,"fuse_unk":False,"dropout":None,"continuing_subword_prefix":None,"end_of_word_suffix":None}
cases = {
 "split_removed": ({"version":"1.0","model":bpe({"a":0,"b":1," ":2}),"pre_tokenizer":{"type":"Split","pattern":{"Regex":" "},"behavior":"Removed","invert":False}}, "a b"),
 "bytelevel_prefix_per_word": ({"version":"1.0","model":bpe({"a":0,"b":1,"\u0120":2}),"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"ByteLevel","add_prefix_space":True,"trim_offsets":True,"use_regex":False}]}}, "a b"),
 "regex_sees_one_word": ({"version":"1.0","model":bpe({"a":0,"b":1,"x":2}),"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Split","pattern":{"Regex":"^."},"behavior":"Isolated","invert":False}]}}, "ab ab"),
 "replace_longer_patterns": ({"version":"1.0","model":bpe({"a":0,"b":1,"e":2," ":3,"\u00e9":4}),"normalizer":{"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"String":"aa"},"content":"b"},{"type":"Replace","pattern":{"String":"\u00e9"},"content":"ee"},{"type":"Replace","pattern":{"String":"bab"},"content":""}]}}, "aaaaa \u00e9aa babab aaa"),
 "strip_accents_alone": ({"version":"1.0","model":bpe({"\u00e9":0,"e":1,"\u0915":2,"\u093e":3}),"normalizer":{"type":"StripAccents"}}, "\u00e9\u0915\u093e"),
}
out={}
for name,(j,text) in cases.items():
    j.setdefault("added_tokens",[]); j.setdefault("normalizer",None); j.setdefault("pre_tokenizer",None); j.setdefault("post_processor",None); j.setdefault("decoder",None); j.setdefault("truncation",None); j.setdefault("padding",None)
    t=Tokenizer.from_str(json.dumps(j))
    ids=t.encode(text, add_special_tokens=False).ids
    out[name]={"json":json.dumps(j),"text":text,"ids":ids}
    print(name, repr(text), ids)
import os
path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "tokenizers", "pipeline-cases.json")
with open(path, "w") as f:
    json.dump({"tokenizers": __import__("tokenizers").__version__, "cases": out}, f, indent=1)
print("wrote", path)
