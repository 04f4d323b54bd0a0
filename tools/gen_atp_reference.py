"""Attribution patching's reference, by torch autograd in float64 (issue 25 item 5).

For each fixture below, on its task rows (tests/fixtures/<model>/task.jsonl, gen_task_fixtures.py), writes
tests/fixtures/<model>/atp-reference.json: per query head, Nanda's attribution-patching estimate of the
effect of patching the head alone at every position,

    atp[l][h] = (1/n) sum over rows r, positions t of <z_other[r, t, h] - z_run[r, t, h], dM_r/dz_run[r, t, h]>

where z is the head's slice of the input of the attention output projection (hp_ref's hook point), the
derivative is the total one (through every later layer: torch's retain_grad on the hooked input) at the
unmasked model, and M_r is row r's
  - "logit_diff": -(logit[answer] - logit[wrong]) at the last position (so larger = worse, as headprune
    differentiates it), or
  - "loss": -log softmax(logits)[answer] there.
"resample": the run is on the prompt, z_other the unmasked model's on the row's corrupt prompt; "denoise":
the run is on the corrupt prompt, z_other the clean one. Each row runs alone at its own length.

Usage (torch 2.x, transformers<5):
    /work/venv/bin/python tools/gen_atp_reference.py            # every fixture below
    /work/venv/bin/python tools/gen_atp_reference.py gpt2-tiny  # one
"""
import json
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_task_fixtures as gtf  # noqa: E402

# unpruned causal fixtures (a pruned one's slices would need its kept heads; dynamic rope's rows depend on padding)
FIXTURES = ["gpt2-tiny", "gpt2-untied", "llama-gqa", "llama-mlp-bias", "qwen2-bias", "mistral-window", "stories260K",
            "qwen3-qknorm", "phi3-fused", "neox-parallel", "neox-sequential",
            "olmo2-post-norms", "gemma2-softcap", "gemma3-local"]


def run_grad(p, ids, answer, wrong, metric):
    """The unmasked model on one row (1, T): every layer's hooked input and its gradient of M."""
    kept = {}

    def keep(layer):
        def hook(module, args):
            x = args[0]
            x.retain_grad()
            kept[layer] = x
        return hook

    hs = [m.register_forward_pre_hook(keep(l)) for l, m in enumerate(p.hooks.modules)]
    p.hooks.mode = None
    with torch.enable_grad():
        logits = p.model(input_ids=ids, use_cache=False).logits
        last = logits[0, -1]
        m = -(last[answer] - last[wrong]) if metric == "logit_diff" else -torch.log_softmax(last, -1)[answer]
        m.backward()
    for h in hs:
        h.remove()
    return [kept[l].detach() for l in range(p.n_layers)], [kept[l].grad.detach() for l in range(p.n_layers)]


def reference(p, rows):
    out = {}
    for abl in ("resample", "denoise"):
        out[abl] = {}
        for metric in ("logit_diff", "loss"):
            acc = [[0.0] * p.n_heads for _ in range(p.n_layers)]
            for r in rows:
                run, other = (r["prompt_ids"], r["corrupt_ids"]) if abl == "resample" else (r["corrupt_ids"],
                                                                                          r["prompt_ids"])
                ids, oids = torch.tensor([run]), torch.tensor([other])
                _, zo = p.record(oids)
                z, g = run_grad(p, ids, r["answer_id"], r["wrong_id"], metric)
                for l, h, j in p.heads():
                    s = slice(j * p.d_head, (j + 1) * p.d_head)
                    acc[l][h] += float(((zo[l][0, :, s] - z[l][0, :, s]) * g[l][0, :, s]).sum()) / len(rows)
            out[abl][metric] = acc
    return out


def one(name):
    d = os.path.join(gtf.ROOT, name)
    p = gtf.load(d)
    for prm in p.model.parameters():
        prm.requires_grad_(False)
    rows = [json.loads(l) for l in open(os.path.join(d, "task.jsonl"))]
    # the hooked input must carry a gradient: let the embeddings' output require one
    emb = p.model.get_input_embeddings()
    hook = emb.register_forward_hook(lambda mod, a, o: o.requires_grad_(True))
    ref = reference(p, rows)
    hook.remove()
    ref.update({"n_rows": len(rows), "n_layers": p.n_layers, "n_heads": p.n_heads,
                "definitions": {"atp": __doc__.split("\n\n")[1].strip()},
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__}})
    path = os.path.join(d, "atp-reference.json")
    with open(path, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(name, "->", path)


if __name__ == "__main__":
    for n in sys.argv[1:] or FIXTURES:
        one(n)
