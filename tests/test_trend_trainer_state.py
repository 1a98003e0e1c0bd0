"""A Trainer run's trainer_state.json values (global_step, epoch, best_metric, best_model_checkpoint...) in `trend`'s
non-tensor values that change and `diff`'s non-tensor values that differ: transformers' own Trainer (save_steps=1,
an evaluation every step with metric_for_best_model) writes the run; each step's value is what json.load gives
back from that step's trainer_state.json. Before, only optimizer.pt's param_groups were compared: the step, the
epoch and the best metric that changed at every step were in neither report. The run logs every other step
(logging_steps=2, save_steps=1): a checkpoint's learning rate is the one logged at its step, else optimizer.pt's;
before, checkpoint-3 showed the rate logged at step 2."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ckptstat.analysis.trend import trend  # noqa: E402

STEPS = 3


class _Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("trainer_state") / "out")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    args = transformers.TrainingArguments(output_dir=out, max_steps=STEPS, save_steps=1, eval_strategy="steps",
                                          eval_steps=1, metric_for_best_model="loss", per_device_train_batch_size=4,
                                          learning_rate=1e-2, logging_steps=2, report_to=[], use_cpu=True,
                                          lr_scheduler_type="linear", disable_tqdm=True)
    transformers.Trainer(model=transformers.LlamaForCausalLM(cfg), args=args, train_dataset=_Data(),
                         eval_dataset=_Data()).train()
    return out


def _flat(prefix, value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flat(f"{prefix}.{k}", v)
    else:
        yield prefix, value


def _state(out, step):
    with open(os.path.join(out, f"checkpoint-{step}", "trainer_state.json")) as f:
        state = json.load(f)
    state.pop("log_history")
    return dict(_flat("trainer_state", state))


def test_trainer_state_values_in_trend(run):
    states = [_state(run, s) for s in range(1, STEPS + 1)]
    want = {n: [s.get(n) for s in states] for n in states[0]}
    want = {n: s for n, s in want.items() if any(a != b for a, b in zip(s, s[1:]))}
    assert {"trainer_state.global_step", "trainer_state.epoch", "trainer_state.best_metric"} <= set(want)
    got = {v["name"]: v["series"] for v in trend([run])["values"] if v["name"].startswith("trainer_state.")}
    assert got == want


def test_trainer_state_values_in_diff(run, cli):
    a, b = _state(run, 1), _state(run, 2)
    rc, out, _ = cli("diff", os.path.join(run, "checkpoint-1"), os.path.join(run, "checkpoint-2"), "--json")
    assert rc in (0, 1)
    report = json.loads(out)
    rows = {r["name"]: r for r in report["objects"]}
    changed = {n for n in a if a[n] != b.get(n)}
    assert {"trainer_state.global_step", "trainer_state.best_metric"} <= changed
    for n in changed:
        assert rows[n]["a"] == a[n] and rows[n]["b"] == b[n], n


def test_the_learning_rate_is_the_one_of_the_checkpoints_step(run):
    r = trend([run])
    for s in r["steps"]:
        folder = os.path.join(run, f"checkpoint-{s['step']}")
        with open(os.path.join(folder, "trainer_state.json")) as f:
            state = json.load(f)
        logged = [e["learning_rate"] for e in state["log_history"]
                  if "learning_rate" in e and e["step"] == state["global_step"]]
        lr = torch.load(os.path.join(folder, "optimizer.pt"), weights_only=True)["param_groups"][0]["lr"]
        assert s["learning_rate"] == (logged[-1] if logged else lr), s["step"]
    steps = [s["step"] for s in r["steps"]]
    assert steps == [1, 2, 3]
    with open(os.path.join(run, "checkpoint-3", "trainer_state.json")) as f:
        stale = [e for e in json.load(f)["log_history"] if "learning_rate" in e]
    assert stale[-1]["step"] == 2 and r["steps"][2]["learning_rate"] != stale[-1]["learning_rate"]
