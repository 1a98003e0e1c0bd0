"""Which models of the installed transformers `flops` and `memory` answer, by which path, and whether exactly
(issue 34). Runnable by hand; tests/test_coverage_walk.py runs a sample of it:

    python tests/coverage_walk.py                    # every class of the TASKS' auto mappings
    python tests/coverage_walk.py --only llama,jamba --tasks causal
    python tests/coverage_walk.py --out docs/coverage.md

For each (task, model type, class) of transformers' auto mappings (TASKS: causal LMs, masked LMs, image
classification, CTC speech recognition, and the task heads: sequence and token classification, extractive QA, multiple
choice, sequence-to-sequence LMs, audio and audio-frame classification, x-vectors; vision-language models on text
tokens; the base models, AutoModel's, of the model types with a text LM or an image classifier): its config class at
tiny sizes (census_audit.tiny_config), written as a config.json naming the class. The oracle is the model transformers
builds from it on the CPU (fp32, eager attention): one forward, its FLOPs counted by FlopCounterMode (grouped_mm by
the product's one rule: analysis/meta.py); for a causal LM or a vision-language model (no pixel values: its language
model and LM head), SEQ tokens with use_cache and the bytes of the cache it returns (or of the DynamicCache generate
would pass a wrapper that makes none); other text models SEQ tokens (an encoder-decoder's decoder as many; a multiple-
choice model [1, CHOICES, SEQ], which ckptstat counts as CHOICES sequences); an image classifier or its base model one
image at the config's image_size; a CTC model or an audio (or audio frame) classifier AUDIO raw samples, an x-vector
model 16,000 (WAVEFORMS); and its parameters (num_parameters: a tied weight once). ckptstat answers from the config
alone (census.model.load, then the meta path where no op template describes the model: analysis/meta.load): its matmul
FLOPs for the same input, the parameters the config predicts (against num_parameters(), less the modules a multimodal
wrapper keeps outside its analytic model: its towers and projector, ArchSpec.outside, families/wrappers.py, which only
a checkpoint counts) and, for a causal LM or a vision-language model, its cache bytes at 4 bytes an element; and the
same from the folder its save_pretrained writes (weights and config.json, the names transformers writes: the
prediction plus what is counted outside is all of num_parameters()). Each class ends as one of:
  static      the op template answered, FLOPs, parameters and cache bytes equal the oracle's
  meta        transformers on the meta device answered (no template), equal the oracle's
  wrong       an answer that differs from the oracle (the figures say by how much)
  refused     ckptstat said it cannot answer (the reason)
  crashed     ckptstat raised something other than its own one-line error (a bug: the reason)
  no oracle   transformers could not build or run the class at tiny sizes (the reason): not counted
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from census_audit import Overrun, reason, time_budget, tiny_config  # noqa: E402

SEQ = 8
AUDIO = 4000       # raw samples a CTC model reads (a quarter second at 16 kHz; past every tiny conv stack's field)
OUTCOMES = ("static", "meta", "wrong", "refused", "crashed", "no oracle")
# task -> (transformers' auto mapping, what the record calls it); causal LMs also compare their cache
TASKS = {"causal": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "causal LMs"),
         "masked": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "masked LMs"),
         "image": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "image classifiers"),
         "ctc": ("MODEL_FOR_CTC_MAPPING_NAMES", "CTC speech recognisers"),
         "seqcls": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "sequence classifiers"),
         "tokcls": ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "token classifiers"),
         "qa": ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "extractive question answering"),
         "mc": ("MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES", "multiple choice"),
         "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "sequence-to-sequence LMs"),
         "audio": ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "audio classifiers"),
         "frame": ("MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES", "audio frame classifiers"),
         "xvector": ("MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES", "speaker embeddings (x-vectors)"),
         "vlm": ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "vision-language models, text tokens"),
         "base": ("MODEL_MAPPING_NAMES", "base models of text LMs (AutoModel: embedding models, hidden states)"),
         "vbase": ("MODEL_MAPPING_NAMES", "base models of image classifiers (AutoModel: image feature extractors)")}
# the tasks whose models read one image at the config's image size
IMAGES = ("image", "vbase")
# base models walked: those of the model types with a text LM (BertModel, LlamaModel, T5Model: what sentence-transformers
# and embedding models save) and, apart (vbase, one image), of the image classifiers (ViTModel, Dinov2Model: feature
# extractors); not every AutoModel (audio, multimodal: their heads' tasks walk them)
TEXT_LMS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES")
# the tasks whose forward returns a cache the planner's must equal: a causal LM's, a vision-language model's text-only
CACHED = ("causal", "vlm")
# the tasks whose models read raw samples: AUDIO, an x-vector's a second (its TDNN layers' field, 15 frames at the
# default tdnn_kernel and tdnn_dilation, is past AUDIO's 12)
WAVEFORMS = {"ctc": AUDIO, "audio": AUDIO, "frame": AUDIO, "xvector": 16000}
CHOICES = 2        # a multiple-choice model's choices per example: [1, CHOICES, SEQ] token ids


def classes(tasks: tuple[str, ...] = ("causal",)) -> list[tuple[str, str, str]]:
    """(task, model_type, class name) of every class transformers maps for each task, in mapping order."""
    from transformers.models.auto import modeling_auto

    out: dict[tuple[str, str, str], None] = {}
    text = {mt for m in TEXT_LMS for mt in getattr(modeling_auto, m)}
    images = set(getattr(modeling_auto, TASKS["image"][0]))
    for task in tasks:
        for model_type, names in getattr(modeling_auto, TASKS[task][0]).items():
            if (task == "base" and model_type not in text) or (task == "vbase" and model_type not in images - text):
                continue
            for name in (names,) if isinstance(names, str) else names:
                out[(task, model_type, name)] = None
    return list(out)


def oracle(task: str, cls: Any, cfg: Any, save_to: str) -> tuple[int, int, int, dict[str, int]]:
    """(FLOPs, cache bytes, parameters, each parameter's size) of one forward of the model transformers builds (CPU,
    fp32): SEQ tokens ([1, CHOICES, SEQ] for multiple choice), one image or AUDIO samples; a causal LM's cache (else
    0); its unique parameters (num_parameters: a tied weight once) and their sizes by name (a tied weight once).
    `save_to`: a folder its save_pretrained writes."""
    import torch

    from ckptstat.analysis import meta

    torch.manual_seed(0)
    # no parameter requires grad: FlopCounterMode's module tracker hooks the grad of a module's inputs, and a slice of a
    # weight passed to a module (DBRX's experts) would be one that requires grad with no grad_fn under no_grad
    model = cls._from_config(cfg, attn_implementation="eager").eval().requires_grad_(False)
    if task in IMAGES:
        args = {"pixel_values": torch.zeros((1, getattr(cfg, "num_channels", 3), *meta.image_sides(cfg)))}
    elif task in WAVEFORMS:
        args = {"input_values": torch.zeros((1, WAVEFORMS[task]))}
    else:
        vocab = cfg.get_text_config().vocab_size
        ids = torch.arange(SEQ).reshape(1, SEQ) % vocab
        if task == "mc":
            ids = ids.expand(CHOICES, SEQ).reshape(1, CHOICES, SEQ)
        args = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if task in CACHED:
            # positions from the input: a cache of only linear-attention (SSM, DeltaNet) layers has no get_seq_length
            args.update(position_ids=torch.arange(SEQ).reshape(1, SEQ), use_cache=True)
        elif getattr(cfg, "is_encoder_decoder", False):
            args.update(decoder_input_ids=ids)
    with meta.flop_counter() as counter, torch.no_grad():
        out = model(**args)
    cache = (out["cache"] if "cache" in out else getattr(out, "past_key_values", None)) if task in CACHED else None
    if task == "vlm" and cache is None:
        # a wrapper that makes no cache of its own (Granite 4 Vision's text model: generate passes one in): the one
        # generate would pass, a DynamicCache of its text config (a causal LM without one, BERT's not a decoder, has none)
        from transformers import DynamicCache
        with meta.flop_counter() as counter, torch.no_grad():
            out = model(**args, cache=DynamicCache(config=cfg.get_text_config()))
        cache = out["cache"] if "cache" in out else getattr(out, "past_key_values", None)
    params = model.num_parameters()
    sizes = {name: p.numel() for name, p in model.named_parameters()}
    model.save_pretrained(save_to)
    if task == "causal" and cache is None and out.get("state") is not None:   # RWKV returns its state, five tensors
        return counter.get_total_flops(), sum(t.numel() * t.element_size() for t in out["state"]), params, sizes
    return counter.get_total_flops(), (meta.cache_bytes(cache) if cache is not None else 0), params, sizes


def ours(task: str, path: str) -> tuple[str, int, int, int, tuple[str, ...]]:
    """(path that answered, matmul FLOPs, cache bytes at 4 bytes an element; 0 but for a causal LM, parameters: those
    the config predicts plus those a checkpoint holds outside the analytic model, the modules outside it) for the
    oracle's input (a multiple-choice example's choices counted as sequences of the batch)."""
    from ckptstat.analysis import flops, meta
    from ckptstat.analysis.memory.planner import kv_counted, kv_lines

    m = meta.load(path)
    kv = int(sum(x for _, x, _ in kv_counted(m, kv_lines(m, 1, SEQ, SEQ, 4)))) if task in CACHED else 0
    seq = WAVEFORMS.get(task, SEQ)
    run = flops.run(m, CHOICES if task == "mc" else 1, seq)
    return ("static" if m.oracle is None else "meta"), run["totals"]["flops"], kv, m.predicted["total"] + m.outside_params, \
        m.spec.outside


# causal LMs whose class asserts config.is_decoder, which their config class defaults False (its masked LM asserts
# the opposite, so census_audit's tiny config leaves it)
DECODERS = {"ReformerModelWithLMHead"}


def walk_one(task: str, model_type: str, cls_name: str, workdir: str) -> dict[str, Any]:
    import transformers

    from ckptstat.errors import CkptstatError
    from ckptstat.families.wrappers import is_outside

    cls = getattr(transformers, cls_name, None)
    row: dict[str, Any] = {"task": task, "model_type": model_type, "cls": cls_name}
    saved = os.path.join(workdir, cls_name)   # its save_pretrained folder, answered too: the same figures
    try:
        cfg = tiny_config(cls.config_class)
        if cls_name in DECODERS:
            cfg.is_decoder = True
        want = oracle(task, cls, cfg, saved)
    except Exception as e:   # noqa: BLE001 - any failure of transformers' own build is "no oracle", with its reason
        return {**row, "outcome": "no oracle", "why": reason(e)}
    path = os.path.join(workdir, f"{cls_name}.json")
    with open(path, "w") as f:
        json.dump(dict(cfg.to_dict(), architectures=[cls_name]), f, default=str)
    try:
        by, got_flops, got_kv, got_params, apart = ours(task, path)
        row["saved"] = list(ours(task, saved)[:4])
    except CkptstatError as e:
        return {**row, "outcome": "refused", "why": str(e).replace(path, "config.json").splitlines()[0][:200]}
    except Exception as e:   # noqa: BLE001 - a bug of ours, recorded with where it was raised
        return {**row, "outcome": "crashed", "why": reason(e)}
    # a multimodal wrapper's towers and projector (ArchSpec.outside, families/wrappers.py) are outside the analytic
    # model: a bare config predicts the rest, a checkpoint counts them (its save_pretrained folder: every parameter)
    tower = sum(n for name, n in want[3].items() if is_outside(name, apart))
    row.update(flops=[got_flops, want[0]], cache_bytes=[got_kv, want[1]] if task in CACHED else None,
               params=[got_params, want[2] - tower])
    same = (got_flops, got_kv, got_params + tower) == want[:3] and row["saved"] == [by, *want[:3]]
    return {**row, "outcome": by if same else "wrong", "by": by}


def walk(pairs: list[tuple[str, str, str]], budget: float = 120.0, echo: bool = False) -> list[dict[str, Any]]:
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for i, (task, model_type, cls_name) in enumerate(pairs):
            try:
                with time_budget(budget):
                    row = walk_one(task, model_type, cls_name, workdir)
            except Overrun:
                row = {"task": task, "model_type": model_type, "cls": cls_name, "outcome": "no oracle",
                       "why": f"over the {budget:.0f} s budget"}
            rows.append(row)
            if echo:
                print(f"[{i + 1}/{len(pairs)}] {task:6} {model_type:28} {cls_name:44} {row['outcome']:9} {row.get('why', '')}",
                      flush=True)
    return rows


def tally_line(rows: list[dict[str, Any]]) -> str:
    counted = [r for r in rows if r["outcome"] != "no oracle"]
    tally = {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}
    return (f"{len(rows)} classes; {len(counted)} with an oracle: " + ", ".join(f"{tally[o]} {o}" for o in OUTCOMES[:5])
            + f" ({100 * tally['static'] / max(len(counted), 1):.0f}% static, "
            f"{100 * (tally['static'] + tally['meta']) / max(len(counted), 1):.0f}% answered exactly); "
            f"{tally['no oracle']} without an oracle.")


def markdown(rows: list[dict[str, Any]]) -> str:
    import torch
    import transformers

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    lines = ["# Coverage of transformers' models by `flops` and `memory`",
             "",
             f"Written by `python tests/coverage_walk.py --out docs/coverage.md` with transformers {transformers.__version__}, "
             f"torch {torch.__version__.split('+')[0]}: every class of "
             + ", ".join(f"`{TASKS[t][0]}`" for t in tasks) + " at tiny sizes, one forward on the CPU as the oracle "
             f"(FlopCounterMode; a causal LM's or a vision-language model's {SEQ} text tokens and the cache it returns, "
             f"other text models' {SEQ} tokens, a multiple-choice model's [1, {CHOICES}, {SEQ}] counted as {CHOICES} "
             "sequences, one image at the config's "
             f"image_size, {AUDIO:,} raw audio samples, an x-vector's {WAVEFORMS['xvector']:,}; parameters against "
             "num_parameters(); each from its config.json and from its save_pretrained folder). The rules and "
             "outcomes: tests/coverage_walk.py's docstring.",
             "",
             "All: " + tally_line(rows)]
    for task in tasks:
        mine = [r for r in rows if r["task"] == task]
        title = TASKS[task][1]
        lines += ["", f"## {title[0].upper() + title[1:]} (`{TASKS[task][0]}`)", "", tally_line(mine), "",
                  "| model type | class | outcome | FLOPs (ours / oracle) | cache bytes (ours / oracle) | "
                  "parameters (ours / oracle) | why |",
                  "|---|---|---|---|---|---|---|"]
        for r in sorted(mine, key=lambda r: (OUTCOMES.index(r["outcome"]), r["model_type"], r["cls"])):
            f, c, p = r.get("flops"), r.get("cache_bytes"), r.get("params")
            lines.append(f"| {r['model_type']} | {r['cls']} | {r['outcome']} | {f'{f[0]:,} / {f[1]:,}' if f else ''} | "
                         f"{f'{c[0]:,} / {c[1]:,}' if c else ''} | {f'{p[0]:,} / {p[1]:,}' if p else ''} | "
                         f"{r.get('why', '').replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model types")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    ap.add_argument("--out", default="", help="write the markdown record here")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds per class")
    args = ap.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    only = set(args.only.split(",")) - {""}
    rows = walk([p for p in classes(tuple(args.tasks.split(","))) if not only or p[1] in only], args.budget, echo=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(markdown(rows))
    wrong = [r for r in rows if r["outcome"] in ("wrong", "crashed")]
    for r in wrong:
        print(f"  {r['outcome'].upper()} {r['cls']}: {r.get('flops') or r.get('why')}, cache {r.get('cache_bytes')}, "
              f"params {r.get('params')}, saved {r.get('saved')}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
