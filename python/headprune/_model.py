"""headprune.Model: a model folder opened by the engine, evaluated in process."""
import html
import json
import os

import numpy as np

from . import _engine


def int_option(cmd, name, value, hi):
    """value as the command line takes an integer option (engine/cli/cli_util.c, int_option): an int or numpy
    integer from 1 to hi, not a bool or a float; else ValueError with the CLI's line, name for its --option."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 1 <= value <= hi:
        raise ValueError(f"{cmd}: {name} must be an integer from 1 to {hi} (not '{value}')")
    return int(value)


def edge_list(what, edges, sep):
    """None, or edges (a spec string, or an iterable of edge strings) as one string joined by sep."""
    if edges is None or isinstance(edges, str):
        return edges
    try:
        items = list(edges)
    except TypeError:
        raise ValueError(f"eval: {what} must be a string or an iterable of edge strings, not "
                         f"{type(edges).__name__}") from None
    for e in items:
        if not isinstance(e, str):
            raise ValueError(f"eval: {what}: each edge is a string \"SENDER>RECEIVER\", not {e!r}")
    return sep.join(items)


def mask_spec(heads, shape, what="mask"):
    """A mask spec from what a caller may give: None, a spec string ("0.1,2.*"), an iterable of "l.h"
    strings or (layer, head) pairs, or a boolean array of the model's shape (n_layers, n_heads) with True
    where what (mask or keep) names a head."""
    if heads is None or isinstance(heads, str):
        return heads
    try:
        grid = np.asarray(heads)
    except ValueError:  # rows of several kinds ("0.1" beside (2, 3)): a list of heads
        grid = None
    if grid is not None and grid.dtype == bool:  # an array or a nested list of booleans
        if grid.shape != tuple(shape):  # a transposed grid would name other heads
            raise ValueError(f"{what}: a boolean array must be (n_layers, n_heads) = {tuple(shape)} for this "
                             f"model, not shape {grid.shape}")
        return ",".join(f"{l}.{h}" for l, h in zip(*np.nonzero(grid)))
    parts = []
    for u in heads:
        if isinstance(u, str):
            parts.append(u)
        elif (isinstance(u, (tuple, list, np.ndarray)) and len(u) == 2 and
              all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in u)):
            parts.append(f"{int(u[0])}.{int(u[1])}")  # (layer, head); rows of np.argwhere(mask) too
        else:
            raise ValueError(f"{what}: {u!r} is not a head: give \"layer.head\" or (layer, head)")
    return ",".join(parts)


def ids_array(data):
    """data as the engine's int32 C-contiguous ids, its shape kept (the engine shapes ids as it shapes a .npy
    file: a 1-D array is a token stream, cut into rows of seq_len): integer arrays only, in int32's range."""
    a = np.asarray(data)
    if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"data: token ids must be an integer array, not {a.dtype}")
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        bad = a.max() if a.max() > np.iinfo(np.int32).max else a.min()
        raise ValueError(f"data: token id {bad} is out of range")
    return np.asarray(a, dtype=np.int32, order="C")  # (ascontiguousarray would make a scalar 1-D)


class EvalResult(dict):
    """One evaluation: the fields of `headprune eval --json`, with per_seq's, grad's and atp's arrays as
    numpy arrays (grad and atp shaped (n_layers, n_heads); mlp_grad and mlp_atp, each MLP block's, (n_layers,))."""

    def _repr_html_(self):
        names = [k for k in ("loss", "ppl", "acc", "kl", "cos", "logit_diff", "answer_logprob", "answer_prob",
                             "answer_acc", "patch_recovery") if k in self]
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{self[k]:.6g}</td>"
            f"<td>{'' if k not in self.get('unmasked', {}) else format(self['unmasked'][k], '.6g')}</td>"
            f"<td>{'' if k not in self.get('change', {}) else format(self['change'][k], '+.6g')}</td></tr>"
            for k in names)
        head = (f"<p>{html.escape(self['model'])} on {html.escape(str(self['data']))}: {self['n_ablated']} of "
                f"{self['n_heads_present']} heads ablated ({html.escape(self['ablation'])})"
                f"{': ' + html.escape(self['mask']) if self['mask'] else ''}; {self['n_seqs']} sequences, "
                f"{self['n_tokens']} tokens, {self['seconds']:.2f} s</p>")
        return (head + "<table><tr><th>metric</th><th>value</th><th>unmasked</th><th>change</th></tr>"
                + rows + "</table>")


def _result(text):
    r = EvalResult(json.loads(text))
    r["per_seq"] = {k: np.asarray(v, dtype=np.int64 if k == "tokens" else np.float64)
                    for k, v in r["per_seq"].items()}
    for k in ("grad", "atp", "mlp_grad", "mlp_atp"):
        if k in r:
            r[k] = np.asarray(r[k], dtype=np.float64)
    return r


class Model:
    """A Hugging Face model folder (config.json, safetensors, tokenizer), opened by the engine.

    model.info is what `headprune inspect --json` prints; model.eval(...) evaluates one masked variant
    as `headprune eval --json` does, in this process."""

    def __init__(self, path):
        self._m = _engine.Model(os.fspath(path))
        self.path = os.fspath(path)
        self._info = None

    @property
    def info(self):
        """What `headprune inspect --json` prints, as a dict."""
        if self._info is None:
            self._info = json.loads(self._m.info_json())
        return dict(self._info)

    @property
    def shape(self):
        """(n_layers, n_heads, n_kv_heads)"""
        return self._m.shape

    def eval(self, data, mask=None, keep=None, ablation="zero", metric=None, grad=False, threads=None,
             seq_len=None, progress=None, edges=None, circuit=None):
        """Evaluate the model with heads ablated, as `headprune eval --json` does, in this process.

        data: a held-out file (.npy, .jsonl, .bin, .txt with seq_len) or token ids, an integer array,
        read as `--data` reads a .npy file of it: (rows, tokens), or 1-D (tokens) cut into rows of
        seq_len. seq_len: as `--seq-len`, an integer from 1 (None: from the data). mask: the heads to
        ablate, keep: the heads to keep (every other one ablated), each a spec ("0.1,2.*"), "layer.head"
        strings, (layer, head) pairs or a boolean (n_layers, n_heads) array of the model's shape. ablation:
        zero, mean, mean-pos, resample or denoise.
        edges: edges to patch, as `--edges`: a spec ("0.1>2.3:q,mlp:0>logits") or an iterable of edge strings.
        circuit: the edges to keep, every other one patched, as `--circuit`: a file's path, or an iterable of
        edge strings (the file's lines).
        grad: also the gradient at every head's gate ("grad") and its first-order estimate of each
        head's effect ablated alone ("atp"), both (n_layers, n_heads); metric: what grad differentiates
        (loss, kl, logit_diff, cos; implies grad). threads: a count from 1, as `--threads` (None: as many
        as other processes leave idle). progress: None, or a callable taking (done, total) sequences.

        Returns an EvalResult (a dict) with the fields of `eval --json`; arrays are numpy arrays.
        The GIL is released while the engine computes."""
        if mask is not None and keep is not None:
            raise ValueError("eval: give mask (the heads to ablate) or keep (the heads to keep), not both")
        what = "keep" if keep is not None else "mask"
        spec = mask_spec(keep if keep is not None else mask, self.shape[:2], what)
        seq_len = 0 if seq_len is None else int_option("eval", "seq_len", seq_len, _engine.SEQ_LEN_MAX)
        threads = 0 if threads is None else int_option("eval", "threads", threads, _engine.THREADS_MAX)
        if isinstance(data, (str, bytes, os.PathLike)):
            src, name = os.fspath(data), "array"
        else:
            src = ids_array(data)
            name = f"array ({' x '.join(map(str, src.shape))})"
        edges = edge_list("edges", edges, ",")
        circuit_path = os.fsdecode(circuit) if isinstance(circuit, (str, bytes, os.PathLike)) else None
        circuit_text = edge_list("circuit", circuit, "\n") if circuit is not None and circuit_path is None else None
        text = self._m.eval(src, name=name, seq_len=seq_len, mask=spec, keep=keep is not None, ablation=ablation,
                            grad=bool(grad), grad_metric=metric, threads=threads, progress=progress, edges=edges,
                            circuit=circuit_path, circuit_text=circuit_text)
        return _result(text)

    def tokenize(self, text, special=False):
        """Token ids of text (a list of ints), as `headprune tokenize` gives them; special: with the special
        tokens the tokenizer declares."""
        return self._m.tokenize(text, special=special)

    def decode(self, ids, skip_special=False):
        """The text of token ids, as Hugging Face's tokenizer.decode gives it."""
        return self._m.decode(ids_array(ids).tobytes(), skip_special=skip_special)

    def close(self):
        """Release the weights now (else when the object goes)."""
        self._m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        i = self.info
        return (f"Model({self.path!r}: {i['architecture']} ({i['model_type']}), {i['n_layers']} layers x "
                f"{i['n_heads']} heads, {i['n_kv_heads']} KV heads, {i['n_params']} parameters, {i['dtype']})")

    def _repr_html_(self):
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                       for k, v in self.info.items())
        return f"<table>{rows}</table>"
