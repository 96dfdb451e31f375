"""experiments/: the KJV loader; the cells and tables (cells.py: the commands of every defined cell); provenance
(provenance.py: "+dirty" for code only); the results file (results_file.py); the runner (runner.py: row format, skipped
when done, --parallel, --device, the STOP file); attempts and resume (attempts.py: no row for a failed or killed run,
a killed cell resumed from its checkpoint); reproduce.py; and the report's aggregation (mean ± std, seed counts,
pending, aliases), the screens and the long cells.

Real runs of bert-tiny cells on a slice of the KJV: one of 2 steps (about 10 s), and one of 8 steps run in one go,
killed and resumed, and from its train_command (about 40 s); everything else is offline and synthetic."""

import gzip
import hashlib
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

import attempts
import cells
import figures
import kjv
import provenance
import report
import results_file
import runner

ROOT = Path(__file__).resolve().parents[2]

ROW_KEYS = {
    "id",
    "claim",
    "variant",
    "size",
    "seed",
    "config",
    "steps",
    "eval_loss",
    "eval_perplexity",
    "diverged",
    "eval_curve",
    "train_curve",
    "train_loss",
    "train_seconds_per_step",
    "train_runtime",
    "num_parameters",
    "wall_seconds",
    "cpu_seconds",
    "resumed_from_step",
    "hardware",
    "command",
    "train_command",
    "git_commit",
    "finished_at",
    "tokenizer_sha256",
    "train_text_sha256",
    "validation_text_sha256",
}


# ------------------------------------------------------------------------------------------------------------ corpus
def test_kjv_split_holds_out_every_20th_chapter(tmp_path):
    chapters = [f"chapter {i} verse one.\nchapter {i} verse two." for i in range(45)]
    archive = tmp_path / "tiny.txt.gz"
    archive.write_bytes(gzip.compress(("\n\n".join(chapters) + "\n").encode()))
    paths = kjv.kjv_files(archive, cache=tmp_path / "cache")
    validation = paths["validation"].read_text().strip().split("\n\n")
    train = paths["train"].read_text().strip().split("\n\n")
    assert validation == [chapters[19], chapters[39]]
    assert len(train) == 43 and chapters[19] not in train and chapters[0] in train
    assert paths["all"].read_text().strip().split("\n\n") == chapters
    stamp = paths["train"].stat().st_mtime_ns
    assert kjv.kjv_files(archive, cache=tmp_path / "cache") == paths  # cached: not written again
    assert paths["train"].stat().st_mtime_ns == stamp


def test_shipped_corpus_is_the_kjv():
    text = gzip.decompress(kjv.ARCHIVE.read_bytes()).decode()
    chapters = kjv.split_documents(text)
    assert len(chapters["all"]) == 1189 and len(chapters["validation"]) == 59
    assert chapters["all"][0].startswith("In the beginning God created the heaven and the earth.")
    assert sum(len(c.splitlines()) for c in chapters["all"]) == 31102  # verses
    assert kjv.ARCHIVE.stat().st_size < 2_000_000


# --------------------------------------------------------------------------------------- cells and tables (cells.py)
def tiny_cell(seed=0):
    return cells.cell(
        "test",
        "tiny",
        "t",
        seed,
        "bert-tiny-dot-product",
        {"num_attention_heads": 2},
        max_steps=2,
        eval_steps=1,
        logging_steps=1,
        max_seq_length=32,
        max_eval_samples=8,
        per_device_train_batch_size=4,
    )


def test_cells_are_checked():
    with pytest.raises(ValueError, match="unknown training flag"):
        cells.cell("c", "v", "s", 0, "bert-mini-dot-product", max_step=3)
    with pytest.raises(ValueError, match="Duplicate cell ids"):
        runner.run_cells([tiny_cell(), tiny_cell()], runner.RunnerArguments(), "x.py")
    with pytest.raises(ValueError, match="No cell matches"):
        cells.select([tiny_cell()], ["nothing/*"])
    twin = cells.cell(
        "test",
        "other-name",
        "t",
        0,
        "bert-tiny-dot-product",
        {"num_attention_heads": 2},
        max_steps=2,
        eval_steps=1,
        logging_steps=1,
        max_seq_length=32,
        max_eval_samples=8,
        per_device_train_batch_size=4,
    )
    kept, aliases = cells.dedupe([tiny_cell(), twin, tiny_cell(1)])
    assert [c.id for c in kept] == ["test/tiny/t/seed0", "test/tiny/t/seed1"]
    assert aliases == {("test", "other-name", "t"): ("test", "tiny", "t")}


def test_every_defined_cell_has_a_valid_command():
    """Each claim's cells: unique ids, a config that builds, and flags that run_pretraining's parser accepts (with
    pretrain_research.py's optimizer flags, for the cells it launches)."""
    from transformers import HfArgumentParser, TrainingArguments

    from hf_attn_variants.presets import preset_config
    from pretrain_research import ResearchOptimizerArguments
    from run_pretraining import DEFAULTS, PretrainingDataArguments, PretrainingModelArguments

    parser = HfArgumentParser(
        (PretrainingModelArguments, PretrainingDataArguments, TrainingArguments, ResearchOptimizerArguments)
    )
    parser.set_defaults(**DEFAULTS)
    claims = report.load_claims()
    ids = [c.id for claim in claims for c in claim.CELLS]
    assert len(ids) == len(set(ids)) > 0
    configs = {}
    for claim in claims:
        for cell in claim.CELLS:
            key = (cell.preset, cell.overrides)
            if key not in configs:
                configs[key] = preset_config(cell.preset, **dict(cell.overrides))
            parser.parse_args_into_dataclasses(cell.flags({"train_file": "t.txt", "validation_file": "v.txt"}, "o"))
        for table in claim.TABLES:
            for _, variant in table.rows:
                for _, size in table.columns:  # every entry is filled by some defined cell, or says it is not
                    groups = set(table.groups(variant, size, claim.ALIASES))
                    defined = any((c.claim, c.variant, c.size) in groups for m in claims for c in m.CELLS)
                    assert defined != ((variant, size) in table.not_run), (table.name, variant, size)
    cell = claims[0].CELLS[0]
    model, data, training, _ = parser.parse_args_into_dataclasses(
        cell.flags({"train_file": "t.txt", "validation_file": "v.txt"}, "/tmp/out")
    )
    assert (training.max_steps, training.learning_rate, data.max_seq_length) == (400, 5e-4, 128)
    assert json.loads(model.config_overrides)["num_attention_heads"] == 16
    twin = configs[("bert-mini-single-head-admin", (("admin", False), ("num_attention_heads", 8)))]
    assert (twin.num_hidden_layers, twin.num_attention_heads, twin.admin) == (32, 1, False)
    wider = next(
        c for claim in claims for c in claim.CELLS if c.id == "single_head/twin-admin/search-h8-lr1e-3-init0.07/seed0"
    )
    model, _, training, _ = parser.parse_args_into_dataclasses(wider.flags({}, "/tmp/out"))
    assert (training.max_steps, training.learning_rate, model.admin_init) == (400, 1e-3, None)
    assert json.loads(model.config_overrides) == {"initializer_range": 0.07, "num_attention_heads": 8}
    closed = next(
        c for claim in claims for c in claim.CELLS if c.id == "single_head/twin-admin-closed/h8-lr1e-3/seed1"
    )
    model, _, training, _ = parser.parse_args_into_dataclasses(closed.flags({}, "/tmp/out"))
    assert (model.preset, model.admin_init, training.learning_rate, training.seed) == (
        "bert-mini-single-head-admin",
        "closed_form",
        1e-3,
        1,
    )


def test_claims_share_identical_runs():
    """A multi-head cell of claim (b) that claim (a) already runs is not defined twice: its table entry reads claim
    (a)'s rows (at h = 16, seed 0: the lr/init study's run, which claim (a)'s sweep reads too); aliases of aliases
    are followed."""
    import single_head
    import talking_heads

    ids = {c.id for c in single_head.CELLS}
    assert "single_head/multi-head/search-h16-lr1e-3/seed0" not in ids
    assert "single_head/multi-head/search-h8-lr3e-3/seed0" in ids  # claim (a) has no run at lr 3e-3
    tables = {t.name: t for t in single_head.TABLES}
    assert tables["sh-search"].groups("multi-head", "search-h16-lr1e-3", single_head.ALIASES) == [
        ("single_head", "multi-head", "search-h16-lr1e-3"),
        ("talking_heads", "dot-product", "lr-init-h16-lr1e-3"),
    ]
    groups = tables["sh-main"].groups("multi-head", "h8-lr1e-3", single_head.ALIASES)
    assert groups == [("single_head", "multi-head", "h8-lr1e-3"), ("talking_heads", "dot-product", "h8-lr1e-3")]
    shared = {c.seed: c for c in talking_heads.CELLS if (c.claim, c.variant, c.size) in groups}
    assert sorted(shared) == [0, 1, 2]
    preset, fields = single_head.VARIANTS["multi-head"]
    own = cells.cell(
        "single_head", "multi-head", "h8-lr1e-3", 1, preset, {"num_attention_heads": 8, **fields}, learning_rate="1e-3"
    )
    assert (own.preset, own.overrides, own.training) == (shared[1].preset, shared[1].overrides, shared[1].training)
    loop = cells.Table("t", "t", "x", (("A", "a"),), (("s", "s"),))
    assert loop.groups("a", "s", {("x", "a", "s"): ("y", "b", "s"), ("y", "b", "s"): ("x", "a", "s")}) == [
        ("x", "a", "s"),
        ("y", "b", "s"),
    ]


def test_long_note_says_what_is_pending():
    assert "pending the screen" in cells.long_note({"x": "1e-3"}, {"y": None})
    picked = cells.long_note({"x": "1e-3"}, {"y": "5e-4"})
    assert "pending" not in picked and "y 5e-4" in picked and "y: by the screening rule" in picked
    assert cells.long_lrs({"x": "1e-3"}, {"y": None, "z": "2e-3"}) == {"x": "1e-3", "y": cells.PENDING_LR, "z": "2e-3"}


# ---------------------------------------------------------------------------------------- provenance (provenance.py)
def test_dirty_counts_code_only(tmp_path, monkeypatch):
    """A row's "+dirty" says the code differs from the commit: results, run folders, docs and Markdown do not."""

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for path in ("code.py", "experiments/results.jsonl", "docs/page.md", "README.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("one\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    for path in ("experiments/results.jsonl", "docs/page.md", "README.md"):
        (tmp_path / path).write_text("two\n")
    assert not provenance.git_commit().endswith("+dirty")
    (tmp_path / "code.py").write_text("two\n")
    assert provenance.git_commit().endswith("+dirty")


# --------------------------------------------------------------------------------------------------- results_file.py
def test_load_results_skips_a_torn_line(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    results_file.append_row(path, {"id": "a"})
    with open(path, "a") as handle:
        handle.write('{"id": "b", "eval_lo')  # a writer killed mid-line
    results_file.append_row(path, {"id": "c"})
    assert [r["id"] for r in results_file.load_results(path)] == ["a", "c"]
    assert "not a JSON line" in capsys.readouterr().err


# -------------------------------------------------------------------------------------------- the runner (runner.py)
@pytest.fixture
def tiny_data(tmp_path):
    chapters = kjv.split_documents(gzip.decompress(kjv.ARCHIVE.read_bytes()).decode())["all"]
    train, validation = tmp_path / "train.txt", tmp_path / "validation.txt"
    train.write_text("\n\n".join(chapters[:12]) + "\n")
    validation.write_text("\n\n".join(chapters[12:15]) + "\n")
    return train, validation


def runner_argv(tmp_path, data, *extra):
    train, validation = data
    return [
        "--results",
        str(tmp_path / "results.jsonl"),
        "--runs_dir",
        str(tmp_path / "runs"),
        "--train_file",
        str(train),
        "--validation_file",
        str(validation),
        *extra,
    ]


def test_tiny_cell_row_then_skipped(tmp_path, tiny_data, monkeypatch):
    monkeypatch.setenv("HF_ATTN_VARIANTS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # not the default: the row records the count the cell ran with
    cell = tiny_cell()
    counts = runner.main([cell], "experiments/test_claim.py", runner_argv(tmp_path, tiny_data))
    assert counts == {"run": 1, "skipped": 0, "failed": 0, "busy": 0}
    (row,) = results_file.load_results(tmp_path / "results.jsonl")
    assert set(row) == ROW_KEYS
    assert (row["id"], row["claim"], row["variant"], row["size"], row["seed"]) == (
        "test/tiny/t/seed0",
        "test",
        "tiny",
        "t",
        0,
    )
    assert row["steps"] == 2 and row["diverged"] is False
    assert 0 < row["eval_loss"] < 20 and row["eval_perplexity"] == pytest.approx(2.718281828 ** row["eval_loss"])
    assert [step for step, _ in row["eval_curve"]] == [1, 2]  # the final evaluation is not a second point
    assert row["eval_curve"][-1][1] == pytest.approx(row["eval_loss"])
    assert row["config"]["overrides"] == {"num_attention_heads": 2}
    assert row["config"]["training"]["max_steps"] == 2 and row["config"]["training"]["max_seq_length"] == 32
    assert row["command"] == "python experiments/test_claim.py --only test/tiny/t/seed0"
    words = shlex.split(row["train_command"])
    assert words[:4] == ["OMP_NUM_THREADS=3", "HF_HUB_OFFLINE=1", "python", "examples/run_pretraining.py"]
    assert words[words.index("--seed") + 1] == "0" and words[words.index("--train_file") + 1] == str(tiny_data[0])
    assert row["wall_seconds"] > 0 and row["cpu_seconds"] > 0 and row["hardware"]["torch"]
    assert row["hardware"]["device"] == "cpu" and "--use_cpu" in words and row["hardware"]["transformers"]
    # provenance: the tokenizer it trained with (the project WordPiece of the training file, in the run's cache)
    # and the text; hashes of the files themselves, not of anything the runner wrote
    (trained,) = (tmp_path / "cache" / "tokenizers").glob("wordpiece-*/tokenizer.json")
    assert row["tokenizer_sha256"] == hashlib.sha256(trained.read_bytes()).hexdigest()
    assert row["train_text_sha256"] == hashlib.sha256(tiny_data[0].read_bytes()).hexdigest()
    assert row["validation_text_sha256"] == hashlib.sha256(tiny_data[1].read_bytes()).hexdigest()
    assert not list((tmp_path / "runs").rglob("*.safetensors"))  # models are not kept by default

    # resumable: a second invocation runs nothing (no subprocess at all) and writes no row
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a finished cell was run again"))
    counts = runner.main([cell], "experiments/test_claim.py", runner_argv(tmp_path, tiny_data))
    assert counts["skipped"] == 1 and counts["run"] == 0
    assert len(results_file.load_results(tmp_path / "results.jsonl")) == 1


FAKE_RUN = """#!{python}
import json, sys, time
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--output_dir") + 1])
start = time.time()
time.sleep(2)
with open(out.parent / "spans.txt", "a") as handle:
    handle.write(f"{{start}} {{time.time()}}\\n")
(out / "all_results.json").write_text(json.dumps({{"eval_mlm_loss": 5.0, "train_loss": 5.5}}))
(out / "trainer_state.json").write_text(json.dumps({{"global_step": 2, "log_history": [
    {{"step": 2, "loss": 5.5}}, {{"step": 2, "eval_mlm_loss": 5.0}}]}}))
(out / "tokenizer.json").write_text("{{}}")
"""


def test_parallel_runs_cells_at_once(tmp_path, tiny_data):
    """--parallel 2: two cells (a fake run_pretraining that sleeps 2 s) whose runs overlap in time, one row each;
    a third runner pass finds both done."""
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_RUN.format(python=sys.executable))
    fake.chmod(0o755)
    argv = runner_argv(tmp_path, tiny_data, "--python", str(fake), "--parallel", "2")
    counts = runner.main([tiny_cell(0), tiny_cell(1)], "experiments/test_claim.py", argv)
    assert counts == {"run": 2, "skipped": 0, "failed": 0, "busy": 0}
    rows = results_file.load_results(tmp_path / "results.jsonl")
    assert sorted(r["id"] for r in rows) == ["test/tiny/t/seed0", "test/tiny/t/seed1"]
    assert all(r["tokenizer_sha256"] == hashlib.sha256(b"{}").hexdigest() for r in rows)
    assert all(r["wall_seconds"] >= 2 for r in rows)
    (a_start, a_end), (b_start, b_end) = [
        map(float, line.split())
        for line in (tmp_path / "runs" / "test" / "tiny" / "t" / "spans.txt").read_text().splitlines()
    ]
    assert max(a_start, b_start) < min(a_end, b_end)  # the two runs overlapped
    assert runner.main([tiny_cell(0), tiny_cell(1)], "experiments/test_claim.py", argv)["skipped"] == 2


def test_device_and_parallel_are_checked(tmp_path, tiny_data):
    import torch

    with pytest.raises(ValueError, match="--device must be one of cpu, cuda"):
        runner.main([tiny_cell()], "x.py", runner_argv(tmp_path, tiny_data, "--device", "tpu"))
    with pytest.raises(ValueError, match="--parallel must be at least 1"):
        runner.main([tiny_cell()], "x.py", runner_argv(tmp_path, tiny_data, "--parallel", "0"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            runner.main([tiny_cell()], "x.py", runner_argv(tmp_path, tiny_data, "--device", "cuda"))
    assert runner.device_flags(runner.RunnerArguments(device="cuda")) == []
    assert not (tmp_path / "results.jsonl").exists()


def test_stop_file_stops_before_the_next_cell(tmp_path, tiny_data):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "STOP").touch()
    counts = runner.main([tiny_cell()], "experiments/test_claim.py", runner_argv(tmp_path, tiny_data))
    assert counts["run"] == counts["failed"] == 0 and not (tmp_path / "results.jsonl").exists()


def test_kjv_cells_use_the_committed_tokenizer():
    recorded, actual = runner.data_flags(runner.RunnerArguments())
    assert recorded["tokenizer_name"] == "examples/data/kjv-wordpiece-8000"
    assert Path(actual["tokenizer_name"]) == kjv.TOKENIZER
    command = cells.train_command(tiny_cell(), recorded, "out", ["--use_cpu", "true"])
    assert "--tokenizer_name examples/data/kjv-wordpiece-8000" in command and command.endswith("--use_cpu true")
    assert '--train_file "$(python experiments/kjv.py --split train)"' in command
    assert command.startswith("OMP_NUM_THREADS=1 ")
    assert cells.train_command(tiny_cell(), recorded, "out", threads="2").startswith("OMP_NUM_THREADS=2 ")


def test_an_attempt_resumes_only_at_its_thread_count(tmp_path):
    """A CPU's results can depend on the thread count: an attempt made with one is not resumed with another."""
    identity = {"id": "c/v/s/seed0", "flags": ["--seed", "0"], "code": "abc", "threads": "1"}
    attempts.start_attempt(tmp_path, identity, "abc")
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    assert attempts.earlier_attempts(tmp_path, identity)[1] == tmp_path / "checkpoint-2"
    assert attempts.earlier_attempts(tmp_path, {**identity, "threads": "2"}) == (None, None)


# --------------------------------------------------------------------------------- attempts and resume (attempts.py)
@pytest.mark.parametrize("script,timeout", [("exit 3", 20.0), ("exec sleep 30", 0.02)], ids=["fails", "killed"])
def test_failed_or_killed_cell_leaves_no_row(tmp_path, tiny_data, script, timeout):
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    argv = runner_argv(tmp_path, tiny_data, "--python", str(fake), "--cell_timeout_minutes", str(timeout))
    with pytest.raises(SystemExit):
        runner.main([tiny_cell()], "experiments/test_claim.py", argv)
    assert results_file.load_results(tmp_path / "results.jsonl") == []
    assert results_file.done_ids(tmp_path / "results.jsonl") == set()


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killed_runner_takes_its_cell_with_it(tmp_path, tiny_data):
    """A runner killed alone (SIGKILL) takes its cell's process with it: none trains on without a runner to write its
    row (a fake run_pretraining that records its pid and sleeps; without `die_with` it outlives the runner)."""
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'child.pid'}\nexec sleep 60\n")
    fake.chmod(0o755)
    argv = runner_argv(tmp_path, tiny_data, "--python", str(fake))
    program = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'experiments')!r})\n"
        "import cells, runner\n"
        "cell = cells.cell('test', 'tiny', 't', 0, 'bert-tiny-dot-product', {}, max_steps=2)\n"
        f"runner.main([cell], 'experiments/test_claim.py', {argv!r})\n"
    )
    runner_proc = subprocess.Popen([sys.executable, "-c", program], cwd=ROOT)
    try:
        for _ in range(600):  # the cell has started once its process has written its pid
            if (tmp_path / "child.pid").exists() and (tmp_path / "child.pid").read_text().strip():
                break
            assert runner_proc.poll() is None, "the runner ended before its cell started"
            time.sleep(0.1)
        child = int((tmp_path / "child.pid").read_text())
        assert alive(child)  # while its runner is
    finally:
        runner_proc.kill()
        runner_proc.wait()
    for _ in range(100):
        if not alive(child):
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the cell's process outlived its killed runner")
    assert results_file.load_results(tmp_path / "results.jsonl") == []


KILLED_RUN = """#!{python}
# run_pretraining, killed (SIGKILL, as a stopped session kills it) as it logs step {step}
import os, runpy, signal, sys
from transformers import Trainer
log = Trainer.log
def log_then_die(self, logs, *args, **kwargs):
    log(self, logs, *args, **kwargs)
    if self.state.global_step == {step}:
        os.kill(os.getpid(), signal.SIGKILL)
Trainer.log = log_then_die
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))  # as `python script.py` puts the script's folder
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_killed_cell_resumes_as_if_never_killed(tmp_path, tiny_data, monkeypatch):
    """A cell killed at step 5 (after checkpoint-4) and run again resumes from checkpoint-4 and ends as the same
    cell run in one go: the same eval and training curves from step 0 (8 steps, 3 per epoch: the resumed epoch's
    masks and order, dropout), its cost that of both attempts. The one-go run with the runner's checkpoints is the
    run its train_command (no checkpoints) makes."""
    import reproduce

    monkeypatch.setenv("HF_ATTN_VARIANTS_CACHE", str(tmp_path / "cache"))
    cell = cells.cell(
        "test",
        "tiny",
        "t",
        0,
        "bert-tiny-dot-product",
        {"num_attention_heads": 2},
        max_steps=8,
        eval_steps=2,
        logging_steps=1,
        max_seq_length=32,
        max_eval_samples=8,
        per_device_train_batch_size=4,
        max_train_samples=12,
    )
    runner.main([cell], "experiments/test_claim.py", runner_argv(tmp_path / "whole", tiny_data))
    (whole,) = results_file.load_results(tmp_path / "whole" / "results.jsonl")

    killed = tmp_path / "killed-python"
    killed.write_text(KILLED_RUN.format(python=sys.executable, step=5))
    killed.chmod(0o755)
    argv = runner_argv(tmp_path / "resumed", tiny_data)
    with pytest.raises(SystemExit):
        runner.main([cell], "experiments/test_claim.py", [*argv, "--python", str(killed)])
    run_dir = tmp_path / "resumed" / "runs" / cell.id
    assert [d.name for d in run_dir.glob("checkpoint-*")] == ["checkpoint-4"]  # only the newest is kept
    assert results_file.load_results(tmp_path / "resumed" / "results.jsonl") == []
    runner.main([cell], "experiments/test_claim.py", argv)
    (resumed,) = results_file.load_results(tmp_path / "resumed" / "results.jsonl")
    assert "=== attempt 2, from step 4" in (run_dir / "log.txt").read_text()
    assert resumed["resumed_from_step"] == [4] and whole["resumed_from_step"] == []
    assert [s for s, _ in resumed["eval_curve"]] == [s for s, _ in whole["eval_curve"]] == [2, 4, 6, 8]
    assert [s for s, _ in resumed["train_curve"]] == [s for s, _ in whole["train_curve"]] == list(range(1, 9))
    for key in ("eval_curve", "train_curve"):
        assert [v for _, v in resumed[key]] == pytest.approx([v for _, v in whole[key]], abs=1e-5), key
    assert resumed["eval_loss"] == pytest.approx(whole["eval_loss"], abs=1e-5)
    assert resumed["train_loss"] == pytest.approx(whole["train_loss"], abs=1e-5)  # Trainer's; the curve's mean
    # non-vacuity: the steps after the checkpoint move the loss far beyond the tolerance (and a resume without the
    # dropout RNG states moved the step-6 eval loss by 2e-4; one without skipping the seen batches, 1e-2)
    assert abs(whole["eval_curve"][-1][1] - whole["eval_curve"][1][1]) > 1e-2
    # the cost of both attempts; the command that makes the cell from scratch
    tried = json.loads((run_dir / attempts.ATTEMPTS).read_text())["attempts"]
    assert [a["from_step"] for a in tried] == [0, 4] and all(a["cpu_seconds"] > 0 for a in tried)
    assert resumed["cpu_seconds"] == pytest.approx(sum(a["cpu_seconds"] for a in tried), abs=0.1)
    assert resumed["wall_seconds"] == pytest.approx(sum(a["wall_seconds"] for a in tried), abs=0.1)
    assert resumed["train_command"] == whole["train_command"].replace(
        str(tmp_path / "whole"), str(tmp_path / "resumed")
    )
    assert "--save_strategy no" in whole["train_command"] and "checkpoint" not in whole["train_command"]
    assert not list(run_dir.glob("checkpoint-*")) and not list(run_dir.rglob("*.safetensors"))

    scratch = tmp_path / "from-scratch"
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # `python`: this one
    subprocess.run(
        ["bash", "-c", reproduce.reproduce_command(whole, scratch)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "PATH": path},
    )
    assert not list(scratch.glob("checkpoint-*"))
    from_scratch = results_file.read_outcome(scratch)
    for key in ("eval_curve", "train_curve"):
        assert [s for s, _ in from_scratch[key]] == [s for s, _ in whole[key]], key
        assert [v for _, v in from_scratch[key]] == pytest.approx([v for _, v in whole[key]], abs=1e-5), key


ATTEMPTED_RUN = """#!{python}
# a fake run_pretraining: FAKE_DIE leaves checkpoint-2 and a checkpoint-4 killed while being saved, and fails;
# otherwise it burns CPU, keeps what the runner's heartbeat wrote meanwhile, and finishes at step 4
import json, os, sys, time
from pathlib import Path
argv = sys.argv[1:]
out = Path(argv[argv.index("--output_dir") + 1])
with open(out.parent / "argv.jsonl", "a") as handle:
    handle.write(json.dumps(argv) + "\\n")
if os.environ.get("FAKE_DIE"):
    for step in (2, 4):
        (out / f"checkpoint-{{step}}").mkdir()
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({{"global_step": 2}}))
    sys.exit(1)
start = time.process_time()
while time.process_time() - start < 0.6:
    pass
time.sleep(0.3)
(out.parent / "heartbeat.json").write_text((out / "attempts.json").read_text())
(out / "all_results.json").write_text(json.dumps({{"eval_mlm_loss": 5.0, "train_loss": 9.0}}))
(out / "trainer_state.json").write_text(json.dumps({{"global_step": 4, "log_history": [
    {{"step": 2, "loss": 6.0}}, {{"step": 4, "loss": 5.0}}, {{"step": 4, "eval_mlm_loss": 5.0}}]}}))
(out / "tokenizer.json").write_text("{{}}")
"""


def test_resume_only_the_same_run(tmp_path, tiny_data, monkeypatch):
    """An attempt at the same cell resumes from the newest complete checkpoint (one killed while being saved is
    removed) and the row counts both attempts; the heartbeat records a running attempt's cost; a folder whose
    attempts were of another run (other flags) is cleared and the cell starts afresh."""
    fake = tmp_path / "fake-python"
    fake.write_text(ATTEMPTED_RUN.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setattr(attempts, "HEARTBEAT_SECONDS", 0.1)
    argv = runner_argv(tmp_path, tiny_data, "--python", str(fake))
    run_dir, cell = tmp_path / "runs" / tiny_cell().id, tiny_cell()
    monkeypatch.setenv("FAKE_DIE", "1")
    with pytest.raises(SystemExit):
        runner.main([cell], "experiments/test_claim.py", argv)
    monkeypatch.delenv("FAKE_DIE")
    runner.main([cell], "experiments/test_claim.py", argv)
    first, second = [json.loads(line) for line in (run_dir.parent / "argv.jsonl").read_text().splitlines()]
    assert "--resume_from_checkpoint" not in first
    assert second[second.index("--resume_from_checkpoint") + 1] == str(run_dir / "checkpoint-2")
    assert second[second.index("--save_strategy") + 1] == "steps" and second.count("--save_strategy") == 1
    assert second[second.index("--save_steps") + 1] == "1"  # the cell's eval_steps
    (row,) = results_file.load_results(tmp_path / "results.jsonl")
    tried = json.loads((run_dir / attempts.ATTEMPTS).read_text())["attempts"]
    assert row["resumed_from_step"] == [2] and [a["from_step"] for a in tried] == [0, 2]
    assert row["wall_seconds"] == pytest.approx(sum(a["wall_seconds"] for a in tried), abs=0.11)
    assert row["wall_seconds"] >= 0.9  # the second attempt alone: 0.6 s of CPU, 0.3 s asleep
    assert row["cpu_seconds"] >= 0.6 and row["train_loss"] == 5.5  # the curve's, not the last attempt's 9.0
    beat = json.loads((run_dir.parent / "heartbeat.json").read_text())["attempts"][-1]
    assert 0.6 <= beat["wall_seconds"] and 0.4 <= beat["cpu_seconds"] <= row["cpu_seconds"] + 0.1
    assert not list(run_dir.glob("checkpoint-*"))

    # another run's attempt: nothing of it is resumed or counted
    record = json.loads((run_dir / attempts.ATTEMPTS).read_text())
    record["flags"] = [*record["flags"], "--learning_rate", "1"]
    (run_dir / attempts.ATTEMPTS).write_text(json.dumps(record))
    (run_dir / "checkpoint-3").mkdir()
    (run_dir / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    runner.main([cell], "experiments/test_claim.py", ["--results", str(tmp_path / "again.jsonl"), *argv[2:]])
    (row,) = results_file.load_results(tmp_path / "again.jsonl")
    assert "--resume_from_checkpoint" not in json.loads((run_dir.parent / "argv.jsonl").read_text().splitlines()[-1])
    assert row["resumed_from_step"] == []
    assert len(json.loads((run_dir / attempts.ATTEMPTS).read_text())["attempts"]) == 1


# --------------------------------------------------------------------------------------------------------- reproduce
def test_reproduce_command_replaces_the_output_folder():
    import reproduce

    row = {
        "id": "c/v/s/seed0",
        "train_command": "OMP_NUM_THREADS=1 python examples/run_pretraining.py "
        '--train_file "$(python experiments/kjv.py --split train)" --output_dir experiments/runs/c/v/s/seed0 '
        "--seed 0",
    }
    command = reproduce.reproduce_command(row, "/tmp/scratch dir/output")
    assert command == (
        "OMP_NUM_THREADS=1 python examples/run_pretraining.py "
        '--train_file "$(python experiments/kjv.py --split train)" '
        "--output_dir '/tmp/scratch dir/output' --seed 0"
    )
    assert reproduce.reproduce_command({"train_command": command}, "x").endswith("--output_dir x --seed 0")
    with pytest.raises(ValueError, match="cannot be re-run"):
        reproduce.reproduce_command({"id": "old"}, "x")
    with pytest.raises(ValueError, match="No results row has id"):
        reproduce.find_row([row], "c/v/s/seed1")
    assert reproduce.find_row([row, {**row, "eval_loss": 2.0}], "c/v/s/seed0")["eval_loss"] == 2.0  # the newest


def test_reproduce_reruns_in_a_scratch_cache(tmp_path, capsys, monkeypatch):
    """A row whose command is a fake run: it must run from the repository root with both caches pointed into the
    scratch folder, and the report gives the recorded and new loss and their difference."""
    import reproduce

    seen = tmp_path / "seen.json"
    script = (
        "import json, os, sys; from pathlib import Path; "
        "out = Path(sys.argv[sys.argv.index('--output_dir') + 1]); out.mkdir(parents=True); (out / 'all_results.json').write_text(json.dumps({'eval_mlm_loss': 5.25})); "
        "(out / 'tokenizer.json').write_text('{}'); "
        f"Path({str(seen)!r}).write_text(json.dumps([os.getcwd(), os.environ['HF_ATTN_VARIANTS_CACHE'], "
        "os.environ['HF_DATASETS_CACHE']]))"
    )
    row = {
        "id": "c/v/s/seed0",
        "eval_loss": 5.5,
        "tokenizer_sha256": hashlib.sha256(b"{}").hexdigest(),
        "hardware": {"cpu": "a CPU"},
        "train_command": f"OMP_NUM_THREADS=1 python -c {shlex.quote(script)} --output_dir recorded/out --seed 0",
    }
    results = tmp_path / "results.jsonl"
    results_file.append_row(results, row)
    monkeypatch.setenv("HF_ATTN_VARIANTS_CACHE", str(tmp_path / "my-cache"))
    result = reproduce.main(["c/v/s/seed0", "--results", str(results)])
    assert result["new_eval_loss"] == 5.25 and result["difference"] == pytest.approx(-0.25)
    cwd, cache, datasets = json.loads(seen.read_text())
    assert Path(cwd) == ROOT
    assert cache != str(tmp_path / "my-cache") and Path(cache).parent == Path(datasets).parent
    assert not Path(cache).parent.exists()  # the scratch folder is removed
    out = capsys.readouterr().out
    assert "recorded eval loss 5.5, new 5.25, difference -0.2500" in out and "tokenizer: the same" in out


def test_reproduce_until_a_step_compares_the_curve_there(tmp_path, capsys, monkeypatch):
    """--until_step N adds a checkpoint at N to the row's command, stops the run once that checkpoint holds the
    evaluation at N (the fake run would otherwise sleep for ten minutes) and compares the row's eval curve at N; a
    step the curve lacks is refused before anything runs, and a run that ends first is an error."""
    import reproduce

    script = (
        "import json, sys, time; from pathlib import Path; a = sys.argv; "
        "assert a[a.index('--save_strategy') + 1] == 'steps' and a.count('--save_strategy') == 1; "
        "n = int(a[a.index('--save_steps') + 1]); "
        "out = Path(a[a.index('--output_dir') + 1]) / f'checkpoint-{n}'; out.mkdir(parents=True); "
        "(out / 'tokenizer.json').write_text('{}'); "
        "(out / 'trainer_state.json').write_text(json.dumps({'log_history': [{'step': n, 'loss': 9.0}, "
        "{'step': n, 'eval_mlm_loss': 5.0 + n / 1000}]})); "
        "time.sleep(600)"
    )
    row = {
        "id": "c/v/s/seed0",
        "eval_loss": 4.0,
        "eval_curve": [[400, 5.375], [800, 5.0]],
        "tokenizer_sha256": hashlib.sha256(b"{}").hexdigest(),
        "train_command": f"python -c {shlex.quote(script)} --save_strategy no --output_dir recorded/out --seed 0",
    }
    results = tmp_path / "results.jsonl"
    results_file.append_row(results, row)
    monkeypatch.setenv("HF_ATTN_VARIANTS_CACHE", str(tmp_path / "my-cache"))
    started = time.monotonic()
    result = reproduce.main(["c/v/s/seed0", "--results", str(results), "--until_step", "400"])
    assert time.monotonic() - started < 120  # stopped, not slept out
    assert result["recorded_eval_loss"] == 5.375 and result["new_eval_loss"] == 5.4
    assert result["difference"] == pytest.approx(0.025)
    out = capsys.readouterr().out
    assert "recorded eval loss at step 400 5.375, new 5.4" in out and "tokenizer: the same" in out
    with pytest.raises(ValueError, match=r"no evaluation at step 500.*\[400, 800\]"):
        reproduce.main(["c/v/s/seed0", "--results", str(results), "--until_step", "500"])
    never = {**row, "id": "c/v/s/seed1", "train_command": "python -c 'pass' --output_dir recorded/out"}
    results_file.append_row(results, never)
    with pytest.raises(RuntimeError, match="ended \\(exit 0\\) before its evaluation at step 400"):
        reproduce.main(["c/v/s/seed1", "--results", str(results), "--until_step", "400"])


def test_reproduce_reads_the_metric_of_the_rows_script(tmp_path, monkeypatch):
    """A T5 row's eval_loss is span corruption's target loss (cells.EVAL_METRICS): its re-run is compared on
    eval_target_loss, not on Trainer's eval_loss beside it; a masked-LM row (no script in its config) on
    eval_mlm_loss."""
    import reproduce

    script = (
        "import json, sys; from pathlib import Path; "
        "out = Path(sys.argv[sys.argv.index('--output_dir') + 1]); out.mkdir(parents=True); "
        "(out / 'all_results.json').write_text(json.dumps({'eval_loss': 1.0, 'eval_target_loss': 4.5, "
        "'eval_mlm_loss': 6.5}))"
    )
    command = f"python -c {shlex.quote(script)} --output_dir recorded/out"
    results = tmp_path / "results.jsonl"
    results_file.append_row(
        results,
        {
            "id": "t5/v/s/seed0",
            "eval_loss": 4.75,
            "train_command": command,
            "config": {"script": "examples/run_t5_pretraining.py"},
        },
    )
    results_file.append_row(results, {"id": "mlm/v/s/seed0", "eval_loss": 6.0, "train_command": command, "config": {}})
    monkeypatch.setenv("HF_ATTN_VARIANTS_CACHE", str(tmp_path / "my-cache"))
    assert reproduce.main(["t5/v/s/seed0", "--results", str(results)])["new_eval_loss"] == 4.5
    assert reproduce.main(["mlm/v/s/seed0", "--results", str(results)])["new_eval_loss"] == 6.5


def test_reproduce_at_the_rows_commit(tmp_path, capsys, monkeypatch):
    """--at_row_commit runs the row's command in a worktree of the commit the row records, first on PYTHONPATH:
    a file changed since then is seen as it was; the worktree is removed afterwards; a row without a commit, made
    from uncommitted code, or with a commit git does not have is refused with what to do."""
    import reproduce

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "loss.txt").write_text("5.25")
    subprocess.run([*git, "add", "loss.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (repo / "loss.txt").write_text("9.0")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    monkeypatch.setattr(reproduce, "ROOT", repo)
    script = (
        "import json, os, sys; from pathlib import Path; "
        "out = Path(sys.argv[sys.argv.index('--output_dir') + 1]); out.mkdir(parents=True); "
        "first = os.environ['PYTHONPATH'].split(os.pathsep)[0]; "
        "assert Path(first).resolve() == Path.cwd().resolve(), (first, os.getcwd()); "
        "(out / 'all_results.json').write_text(json.dumps({'eval_mlm_loss': float(Path('loss.txt').read_text())}))"
    )
    row = {
        "id": "c/v/s/seed0",
        "eval_loss": 5.5,
        "hardware": {"cpu": "a CPU"},
        "git_commit": first,
        "train_command": f"python -c {shlex.quote(script)} --output_dir recorded/out",
    }
    results = tmp_path / "results.jsonl"
    results_file.append_row(results, row)
    assert reproduce.main(["c/v/s/seed0", "--results", str(results)])["new_eval_loss"] == 9.0  # this checkout
    result = reproduce.main(["c/v/s/seed0", "--results", str(results), "--at_row_commit"])
    assert result["new_eval_loss"] == 5.25 and result["code"] == first
    assert f"at commit {first}; re-run with the code of {first}" in capsys.readouterr().out
    listed = subprocess.run([*git, "worktree", "list"], check=True, capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1  # the temporary worktree is gone
    for commit, message in (
        (None, "records no git_commit"),
        (first + "+dirty", "uncommitted code"),
        ("0" * 40, "git cannot check out the row's commit"),
    ):
        results_file.append_row(results, {**row, "git_commit": commit})
        with pytest.raises(ValueError, match=message):
            reproduce.main(["c/v/s/seed0", "--results", str(results), "--at_row_commit"])


# ------------------------------------------------------------------------------------------------------------ report
def test_unigram_reference_point():
    """Add-one smoothed unigram cross-entropy, against a hand count: train tokens 0, 0, 1 over a vocabulary of 3
    give p = 3/6, 2/6, 1/6."""
    import unigram

    loss = unigram.unigram_cross_entropy([[0, 0], [1]], [[0, 2]], vocab_size=3)
    assert loss == pytest.approx(-(math.log(3 / 6) + math.log(1 / 6)) / 2, rel=1e-12)
    with pytest.raises(ValueError, match="No evaluation tokens"):
        unigram.unigram_cross_entropy([[0]], [[]], vocab_size=3)


def fake_row(variant, size, seed, loss, diverged=False, claim="fake"):
    return {
        "id": f"{claim}/{variant}/{size}/seed{seed}",
        "claim": claim,
        "variant": variant,
        "size": size,
        "seed": seed,
        "eval_loss": None if diverged else loss,
        "diverged": diverged,
        "cpu_seconds": 60.0,
        "eval_curve": [[1, loss + 1 if loss else None], [2, loss]],
    }


@pytest.fixture
def fake_claim():
    table = cells.Table(
        "fake-table",
        "A fake table",
        "fake",
        (("A", "a"), ("B", "b"), ("C", "c"), ("D", "d")),
        (("small", "s"), ("large", "l")),
        seeds=(0, 1, 2),
    )
    defined = [
        cells.cell("fake", v, s, seed, "bert-tiny-dot-product") for v in "abcd" for s in "sl" for seed in range(3)
    ]
    return types.SimpleNamespace(
        CLAIM="fake", CELLS=defined, TABLES=[table], ALIASES={("fake", "d", "s"): ("other", "base", "s")}
    )


def test_report_aggregates_seeds(fake_claim):
    rows = [
        fake_row("a", "s", 0, 5.0),
        fake_row("a", "s", 1, 5.2),
        fake_row("a", "s", 2, 5.4),
        fake_row("a", "s", 3, 9.0),  # a seed the table does not ask for: not counted
        fake_row("b", "s", 0, 4.6),
        fake_row("b", "l", 0, 4.9),
        fake_row("b", "l", 1, 0.0, diverged=True),
        fake_row("c", "s", 0, 0.0, diverged=True),
        fake_row("base", "s", 0, 4.0, claim="other"),
        fake_row("base", "s", 1, 4.5, claim="other"),
    ]
    (table,) = fake_claim.TABLES
    text = report.render_table(rows, table, fake_claim.ALIASES)
    lines = text.splitlines()
    assert lines[0] == "| variant | small | large |"
    assert lines[2] == f"| A | 5.200 ± {statistics.stdev([5.0, 5.2, 5.4]):.3f} (n=3) | pending |"
    assert lines[3] == "| B | 4.600 (n=1 of 3) | 4.900 (n=2 of 3, 1 diverged) |"
    assert lines[4] == "| C | diverged (n=1 of 3) | pending |"
    assert lines[5] == f"| D | 4.250 ± {statistics.stdev([4.0, 4.5]):.3f} (n=2 of 3) | pending |"  # via the alias
    stalled = report.Entry([5.5, report.UNIGRAM_LOSS - 0.01, report.UNIGRAM_LOSS + 0.2], 0, 3)
    assert stalled.render().endswith("(n=3, 2 stalled)") and report.Entry([5.5], 1, 3).stalled == 0


def test_every_experiment_file_stays_within_450_lines():
    """An experiment file reads top to bottom: one that grows past 450 lines is split by concern (the report's
    figures live in figures.py), not squeezed."""
    lengths = {path.name: len(path.read_text().splitlines()) for path in (ROOT / "experiments").glob("*.py")}
    assert "report.py" in lengths and "figures.py" in lengths
    assert {name: n for name, n in lengths.items() if n > 450} == {}


def test_report_renders_page_blocks_and_curves(tmp_path, fake_claim):
    page = (
        "intro\n<!-- BEGIN summary -->\nold\n<!-- END summary -->\nhand-written text\n"
        "<!-- BEGIN fake-table -->\nold table\n<!-- END fake-table -->\nend\n"
    )
    rows = [fake_row("a", "s", 0, 5.0), fake_row("a", "s", 1, 5.1)]
    out = report.render_page(page, rows, [fake_claim], tmp_path / "research")
    assert out.startswith("intro\n<!-- BEGIN summary -->\nCells defined: 24 (fake 24); run: 2; pending: 22.")
    assert "hand-written text" in out and out.endswith("<!-- END fake-table -->\nend\n")
    assert "old table" not in out and "| B | pending | pending |" in out
    assert "![eval curves: A fake table](research/fake-table.png)" in out
    assert (tmp_path / "research" / "fake-table.png").stat().st_size > 1000
    assert "--only 'fake/*/s/*' 'other/base/s/*' 'fake/*/l/*'" not in out  # one command per claim script:
    assert "python experiments/fake.py --only 'fake/*/s/*' 'fake/*/l/*'" in out
    assert "python experiments/other.py --only 'other/base/s/*'" in out
    assert report.render_page(page, [], [fake_claim], tmp_path / "empty").count("Eval curves: pending.") == 1
    with pytest.raises(ValueError, match="no <!-- BEGIN fake-table -->"):
        report.render_page("<!-- BEGIN summary -->\n<!-- END summary -->\n", rows, [fake_claim], None)


# --------------------------------------------------------------------------------------- past the plateau (issue 22)
def committed_claims():
    import single_head
    import synthesizer
    import talking_heads

    return {
        "talking_heads": (talking_heads, talking_heads.COMMITTED_CELLS),
        "single_head": (single_head, [c for c in single_head.CELLS if "steps" in c.size]),
        "synthesizer": (synthesizer, synthesizer.COMMITTED_CELLS),
    }


def test_long_cells_and_screens():
    """Every cell with the committed tokenizer is a screen cell (seed 0, TRAINING's 400 steps, one of the three
    rates) or a long one (1600 steps, eval every 200, three seeds, the claim's long learning rate), screens first,
    then the long cells seed-major; the issue's contrasts are all there; a screen cell whose configuration equals a
    400-step cell's is defined again (its old row had another tokenizer), not read through an alias."""
    from transformers import HfArgumentParser, TrainingArguments

    from run_pretraining import DEFAULTS, PretrainingDataArguments, PretrainingModelArguments

    parser = HfArgumentParser((PretrainingModelArguments, PretrainingDataArguments, TrainingArguments))
    parser.set_defaults(**DEFAULTS)
    long_ids = set()
    for name, (module, defined) in committed_claims().items():
        kinds = []
        for c in defined:
            training = c.config["training"]
            if c.size.startswith("screen-"):
                assert (c.seed, training["max_steps"], training["eval_steps"]) == (0, 400, 100), c.id
                assert training["learning_rate"] in cells.SCREEN_LRS and c.size.endswith(training["learning_rate"])
                kinds.append((-1, 0))
            else:
                assert (training["max_steps"], training["eval_steps"]) == (1600, 200), c.id
                assert f"-lr{training['learning_rate']}-steps1600" in c.size, c.id
                kinds.append((c.seed, 1))
                long_ids.add(c.id)
        assert kinds == sorted(kinds), name  # screens, then seed 0 of every long cell, then seed 1, ...
        assert sorted({seed for seed, kind in kinds if kind}) == [0, 1, 2]
    assert {
        "talking_heads/dot-product/h16-lr1e-3-steps1600/seed2",
        "talking_heads/talking-heads/h32-lr1e-3-steps1600/seed0",
        "talking_heads/th-hk8-h16-hv8/h16-lr1e-3-steps1600/seed1",
        "single_head/twin/h8-lr1e-3-steps1600/seed0",
        "single_head/multi-head/h8-lr1e-3-steps1600/seed1",
        "single_head/twin-admin-closed/h8-lr1e-3-steps1600/seed2",
        "synthesizer/mixture-random-dot/h4-lr1e-3-steps1600/seed0",
    } <= long_ids
    assert len(long_ids) == 3 * (5 + 3 + 4)
    import synthesizer
    import talking_heads

    by_id = {c.id: c for m in (talking_heads, synthesizer) for c in m.CELLS}
    for new, old in (
        ("synthesizer/dense/screen-h4-lr1e-3/seed0", "synthesizer/dense/h4-lr1e-3/seed0"),
        ("synthesizer/dot-product/screen-h4-lr1e-3/seed0", "talking_heads/dot-product/h4-lr1e-3/seed0"),
        ("talking_heads/th-hk8-h16-hv8/screen-h16-lr1e-3/seed0", "talking_heads/th-hk8-h16-hv8/h16-lr1e-3/seed0"),
    ):
        a, b = by_id[new], by_id[old]
        assert (a.preset, a.overrides, a.training, a.seed) == (b.preset, b.overrides, b.training, b.seed)
    ablation = by_id["talking_heads/th-hk8-h16-hv8/h16-lr1e-3-steps1600/seed1"]
    model, _, training = parser.parse_args_into_dataclasses(ablation.flags({}, "/tmp/out"))
    assert (training.max_steps, training.eval_steps, training.learning_rate, training.logging_steps) == (
        1600,
        200,
        1e-3,
        25,
    )
    assert json.loads(model.config_overrides)["talking_heads_num_key_heads"] == 8


def test_screen_picks_follow_the_rule():
    """SCREEN_PICK is what cells.SCREEN_RULE picks from the committed results file: None while a screen rate has
    no row, the chosen rate once all have (so a finished screen fails this test until its pick is written down, and
    a pick cannot be written down before the screen has run); the long cells train at it."""
    rows = results_file.load_results(results_file.RESULTS)
    for name, (module, _) in committed_claims().items():
        if not hasattr(module, "SCREEN_PICK"):
            continue
        (table,) = [t for t in module.TABLES if t.screen]
        sizes = dict(zip(cells.SCREEN_LRS, (size for _, size in table.columns)))
        for variant, picked in module.SCREEN_PICK.items():
            rule = report.screen_pick(rows, table, variant, sizes, module.ALIASES, cells.PENDING_LR)
            assert picked == rule, (name, variant)
            assert module.LONG_LR[variant] == (cells.PENDING_LR if picked is None else picked)
            assert any(
                c.variant == variant and c.size.endswith(f"-lr{module.LONG_LR[variant]}-steps1600")
                for c in module.CELLS
            )
            note = next(t for t in module.TABLES if t.train_loss and any(v == variant for _, v in t.rows)).note
            assert ("pending the screen" in note) == (picked is None)


def test_screen_pick_rule():
    table = cells.Table("s", "s", "fake", (("A", "a"),), tuple((lr, f"lr{lr}") for lr in cells.SCREEN_LRS), seeds=(0,))
    sizes = {lr: f"lr{lr}" for lr in cells.SCREEN_LRS}

    def pick(*losses):
        rows = [
            fake_row("a", f"lr{lr}", 0, loss, diverged=loss is None)
            for lr, loss in zip(cells.SCREEN_LRS, losses)
            if loss != "missing"
        ]
        return report.screen_pick(rows, table, "a", sizes, {}, "fallback")

    assert pick(5.60, 5.55, 5.58) == "1e-3" and pick(5.54, 5.55, 5.85) == "5e-4"
    assert pick(None, 5.70, 5.85) == "1e-3"  # a diverged run never wins
    assert pick(None, report.UNIGRAM_LOSS - 0.01, 5.90) == "fallback"  # nor a stalled one
    assert pick(5.60, "missing", 5.58) is None  # the screen has not finished
    rows = [fake_row("a", f"lr{lr}", 0, loss) for lr, loss in zip(cells.SCREEN_LRS, (5.60, 5.55, 5.58))]
    block = report.render_block(
        rows, cells.Table("s", "s", "fake", (("A", "a"), ("B", "b")), table.columns, seeds=(0,), screen=True), {}, None
    )
    assert "The rule's pick: A lr 1e-3; B pending." in block


def test_table_patterns_select_the_tables_cells_and_no_other():
    """A table's command (`--only` globs, matched as the runner does) selects its cells and no other of its claim:
    where other variants or seeds share a column's size, the globs name the table's; else they read "*"."""
    every = [
        cells.cell("fake", v, size, seed, "bert-mini-dot-product")
        for v in "abc"
        for size in "st"
        for seed in (0, 1, 2)
        if (v, size) != ("c", "t")
    ]  # c has no cells of size t
    for variants, seeds in (("ab", (0, 1, 2)), ("abc", (0, 1, 2)), ("a", (0,)), ("bc", (1, 2))):
        table = cells.Table(
            "x", "x", "fake", tuple((v.upper(), v) for v in variants), (("S", "s"), ("T", "t")), seeds=seeds
        )
        (patterns,) = report.table_patterns(table, {}, every).values()
        assert {c.id for c in cells.select(every, patterns)} == {
            c.id for c in every if c.variant in variants and c.seed in seeds
        }, (variants, seeds)
        if (variants, seeds) == ("ab", (0, 1, 2)):
            assert patterns == ["fake/a/s/*", "fake/b/s/*", "fake/*/t/*"]
    table = cells.Table("x", "x", "fake", (("A", "a"),), (("S", "s"),))
    assert report.table_patterns(table, {}) == {"fake": ["fake/*/s/*"]}  # without the claim's cells, every one


def test_long_table_shows_train_loss_and_rising_runs():
    table = cells.Table(
        "long", "A long table", "fake", (("A", "a"), ("B", "b")), (("small", "s"),), seeds=(0, 1), train_loss=True
    )
    rising = {
        **fake_row("a", "s", 0, 5.0),
        "eval_curve": [[200, 5.2], [400, 4.9], [600, 5.0]],
        "train_curve": [[25 * i, 9.0 - 0.1 * i] for i in range(1, 25)],
    }  # last 100 steps: 21..24
    flat = {
        **fake_row("a", "s", 1, 4.8),
        "eval_curve": [[200, 5.1], [400, 4.805], [600, 4.8]],
        "train_curve": [[600, 4.0]],
    }
    text = report.render_table([rising, flat], table, {})
    lines = text.splitlines()
    assert lines[0] == "| variant | small: held-out | small: train |" and lines[1] == "|---|---:|---:|"
    train = [statistics.fmean(9.0 - 0.1 * i for i in range(21, 25)), 4.0]
    assert lines[2] == (
        f"| A | 4.900 ± {statistics.stdev([5.0, 4.8]):.3f} (n=2, 1 rising) | "
        f"{statistics.fmean(train):.3f} ± {statistics.stdev(train):.3f} |"
    )
    assert lines[3] == "| B | pending | pending |"
    assert report.final_train_loss(rising) == pytest.approx(train[0])
    short = cells.Table("short", "t", "fake", (("A", "a"),), (("small", "s"),), seeds=(0, 1))
    assert report.render_table([rising, flat], short, {}).splitlines()[0] == "| variant | small |"


def test_paired_table_gives_each_variant_minus_the_baseline_by_seed():
    """A `paired` table's block has, under the table, each later row's final held-out loss minus the first row's of
    the same seed (a seed without a finished baseline makes no pair); a table without it has none."""
    table = cells.Table(
        "long",
        "A long table",
        "fake",
        (("A", "a"), ("B", "b"), ("C", "c")),
        (("small", "s"),),
        seeds=(0, 1, 2),
        train_loss=True,
        paired=True,
    )
    rows = [
        fake_row("a", "s", 0, 5.0),
        fake_row("a", "s", 1, 5.2),
        fake_row("b", "s", 0, 5.1),
        fake_row("b", "s", 1, 5.0),
        fake_row("b", "s", 2, 4.0),
    ]  # b's seed 2: no baseline to pair with
    lines = report.render_block(rows, table, {}, None).splitlines()
    start = lines.index("| paired difference | small |")
    assert lines[start + 2] == (
        f"| B minus A | -0.050 ± {statistics.stdev([0.1, -0.2]):.3f} (seeds 0, 1: +0.100, -0.200) |"
    )
    assert lines[start + 3] == "| C minus A | pending |"
    assert start > lines.index("| variant | small: held-out | small: train |")
    unpaired = cells.Table("long", "A long table", "fake", table.rows, table.columns, seeds=(0, 1, 2))
    assert "| paired difference | small |" not in report.render_block(rows, unpaired, {}, None)


def test_an_entry_the_design_leaves_out_reads_not_run():
    """A (variant, size) in `not_run` reads "not run" in the table and in the paired differences, where an entry of
    the same table that no run has reached yet reads "pending"."""
    table = cells.Table(
        "lr",
        "A table at two rates",
        "fake",
        (("A", "a"), ("B", "b"), ("C", "c")),
        (("slow", "s"), ("fast", "f")),
        seeds=(0,),
        paired=True,
        not_run=(("c", "s"),),
    )
    rows = [fake_row("a", "s", 0, 5.0), fake_row("a", "f", 0, 5.1), fake_row("b", "s", 0, 4.5)]
    lines = report.render_block(rows, table, {}, None).splitlines()
    assert "| C | not run | pending |" in lines
    assert "| B | 4.500 (n=1) | pending |" in lines
    assert "| C minus A | not run | pending |" in lines
    assert "| B minus A | -0.500 (seed 0: -0.500) | pending |" in lines


def test_long_curves_pair_each_variant_with_the_baseline_by_seed(tmp_path):
    def run(variant, seed, losses):
        return {
            **fake_row(variant, "s", seed, losses[-1]),
            "eval_curve": [[200 * (i + 1), v] for i, v in enumerate(losses)],
            "train_curve": [[100, 7.0], [200, 6.0]],
        }

    base = [run("a", 0, [6.0, 5.5, 5.2]), run("a", 1, [6.1, 5.6, 5.3])]
    other = [
        run("b", 1, [6.0, 5.65, 5.4]),
        run("b", 2, [5.0, 4.0, 3.0]),  # seed 2: no baseline to pair with
        {**run("b", 0, [5.9, 5.5, 5.1]), "eval_curve": [[200, 5.9], [400, None], [600, 5.1]]},
    ]
    differences = figures.paired_differences(base, other)
    assert list(differences) == [200, 600]  # the steps every pair has
    assert differences[200] == pytest.approx([-0.1, -0.1]) and differences[600] == pytest.approx([0.1, -0.1])
    assert figures.paired_differences(base, [run("b", 5, [5.0])]) == {}
    table = cells.Table(
        "long", "A long table", "fake", (("A", "a"), ("B", "b")), (("small", "s"),), seeds=(0, 1, 2), train_loss=True
    )
    assert figures.plot_curves(report.curve_panels(base + other, table, {}), table, tmp_path / "long.png")
    assert (tmp_path / "long.png").stat().st_size > 1000


def test_trend_pairs_final_losses_by_seed_across_columns(tmp_path):
    """A trend: per series (each table's variant after its baseline) and column, the final held-out loss minus the
    baseline's of the same seed; a seed without a finished baseline (missing, diverged) makes no pair; a pair with a
    stalled run is counted; the block has the numbers and the figure, and a table whose columns do not match the xs
    is refused."""
    first = cells.Table("one", "t", "fake", (("base", "a"), ("B", "b"), ("C", "c")), (("small", "s"), ("large", "l")))
    second = cells.Table("two", "t", "fake", (("base", "d"), ("E", "e")), (("small", "s2"), ("large", "l2")))
    trend = cells.Trend("fake-trend", "A fake trend", (("(1) ", first), ("(2) ", second)), (1, 2), "size")
    rows = [
        fake_row("a", "s", 0, 5.0),
        fake_row("a", "s", 1, 5.2),
        fake_row("a", "s", 2, 0.0, diverged=True),
        fake_row("b", "s", 0, 5.1),
        fake_row("b", "s", 1, 5.0),
        fake_row("b", "s", 2, 4.0),
        fake_row("a", "l", 0, 4.0),
        fake_row("b", "l", 1, 3.0),  # no pair: seed 1 has no baseline
        fake_row("d", "l2", 2, report.UNIGRAM_LOSS),
        fake_row("e", "l2", 2, report.UNIGRAM_LOSS - 0.25),
    ]
    series = report.trend_series(rows, trend, {})
    assert [label for label, _ in series] == ["(1) B minus base", "(1) C minus base", "(2) E minus base"]
    (_, b), (_, c), (_, e) = series
    assert [s for s, _, _ in b[0]] == [0, 1] and [d for _, d, _ in b[0]] == pytest.approx([0.1, -0.2])
    assert b[1] == [] and c == [[], []] and e[0] == [] and [(s, stall) for s, _, stall in e[1]] == [(2, True)]
    assert e[1][0][1] == pytest.approx(-0.25) and not any(stall for _, _, stall in b[0])
    lines = report.render_trend_table(series, trend).splitlines()
    assert lines[0] == "| paired difference | size 1 | size 2 |"
    assert lines[2] == (
        f"| (1) B minus base | -0.050 ± {statistics.stdev([0.1, -0.2]):.3f} (seeds 0, 1: +0.100, -0.200) | pending |"
    )
    assert lines[4] == "| (2) E minus base | pending | -0.250 (seed 2: -0.250; 1 with a stalled run) |"
    block = report.render_trend(rows, trend, {}, tmp_path / "research")
    assert block.endswith("![A fake trend](research/fake-trend.png)")
    assert (tmp_path / "research" / "fake-trend.png").stat().st_size > 1000
    assert report.render_trend([], trend, {}, tmp_path / "empty").endswith("Figure: pending.")
    claim = types.SimpleNamespace(CLAIM="fake", CELLS=[], TABLES=[], TRENDS=[trend])
    page = "<!-- BEGIN summary -->\n<!-- END summary -->\n<!-- BEGIN fake-trend -->\nold\n<!-- END fake-trend -->\n"
    assert "| (2) E minus base | pending | -0.250 (seed 2:" in report.render_page(page, rows, [claim], None)
    with pytest.raises(ValueError, match="table two has 2 columns, xs has 3"):
        report.trend_series(rows, cells.Trend("bad", "t", (("", second),), (1, 2, 3), "size"), {})


def test_pending_cost_is_per_step_of_the_same_model():
    """The summary's estimate: a pending cell costs its steps times the CPU seconds per step of the finished rows of
    its own model (preset and overrides, whatever the training), else of every row."""
    own = cells.cell("fake", "a", "s", 0, "bert-tiny-dot-product", {"num_attention_heads": 2}, max_steps=1600)
    other = cells.cell("fake", "b", "s", 0, "bert-mini-dot-product", max_steps=400)
    config = json.loads(json.dumps(own.config))
    rows = [
        {"config": config, "cpu_seconds": 400.0, "steps": 400},
        {"config": {**other.config, "preset": "bert-tiny-dot-product"}, "cpu_seconds": 1200.0, "steps": 400},
    ]
    assert report.estimate_cpu_seconds([own], rows) == (pytest.approx(1600.0), 1)
    assert report.estimate_cpu_seconds([other], rows) == (pytest.approx(400 * 2.0), 1)  # mean of 1 and 3 s/step
    newer = {"config": config, "cpu_seconds": 200.0, "steps": 400, "tokenizer_sha256": "x"}  # sparse prediction
    assert report.estimate_cpu_seconds([own, own], rows + [newer]) == (pytest.approx(1600.0), 0)


def test_summary_costs_pending_cells_only_while_some_are_pending():
    a = cells.cell("fake", "a", "s", 0, "bert-tiny-dot-product", max_steps=400)
    b = cells.cell("fake", "b", "s", 0, "bert-tiny-dot-product", max_steps=400)
    claim = types.SimpleNamespace(CLAIM="fake", CELLS=[a, b])
    row = {"id": a.id, "config": json.loads(json.dumps(a.config)), "cpu_seconds": 720.0, "steps": 400}
    half = report.render_summary([row], [claim])
    assert "run: 1; pending: 1." in half and "about 0.2 h of CPU" in half
    whole = report.render_summary([row, {**row, "id": b.id}], [claim])
    assert "run: 2; pending: 0." in whole and "CPU time so far: 0.40 h" in whole and "pending cells" not in whole


# ------------------------------------------------------------------------------------------- across width (issue 33)
def test_width_trend_cells():
    """The width trend's cells: the screens first (width 128's before width 384's: the cheaper), then the long cells
    seed-major, then the one control; every width has 64 units per layer and an FFN of 4x the width, (a) 16 heads
    (head size 8 / 24), (c) 4 heads; each variant has the config fields of its width-256 rows, whose long cells the
    tables read."""
    import width_trend
    from hf_attn_variants.presets import preset_config

    screens = [c for c in width_trend.CELLS if c.size.startswith("screen-")]
    *long, control = [c for c in width_trend.CELLS if not c.size.startswith("screen-")]
    assert width_trend.CELLS == screens + long + [control] and len(screens) == 2 * 3 * 4 and len(long) == 3 * 2 * 4
    assert [c.size.startswith("screen-w128") for c in screens] == [True] * 12 + [False] * 12
    assert [c.seed for c in long] == sorted(c.seed for c in long) and {c.seed for c in screens} == {0}
    for c in width_trend.CELLS:
        training, fields = c.config["training"], dict(c.overrides)
        width, h = fields["hidden_size"], fields["num_attention_heads"]
        config = preset_config(c.preset, **fields)
        assert (config.num_hidden_layers, config.intermediate_size) == (width // 64, 4 * width), c.id
        assert f"w{width}-h{h}-lr{training['learning_rate']}" in c.size, c.id
        if c in screens:
            assert (training["max_steps"], training["learning_rate"]) == (400, c.size.rsplit("-lr", 1)[1])
        else:
            assert (training["max_steps"], training["eval_steps"]) == (1600, 200)
    by_id = {c.id: c for c in width_trend.CELLS}
    th = by_id["width_trend/talking-heads/screen-w384-h16-lr1e-3/seed0"]
    assert dict(th.overrides)["hidden_size"] // 16 == 24
    import talking_heads

    assert {
        k: v for k, v in th.overrides if k not in ("hidden_size", "num_hidden_layers", "intermediate_size")
    } == dict(
        next(
            c for c in talking_heads.CELLS if c.id == "talking_heads/talking-heads/h16-lr1e-3-steps1600/seed0"
        ).overrides
    )
    tables = {t.name: t for t in width_trend.TABLES}
    assert tables["width-long-a"].groups("talking-heads", "w256-h16-steps1600", width_trend.ALIASES)[-1] == (
        "talking_heads",
        "talking-heads",
        "h16-lr1e-3-steps1600",
    )
    assert tables["width-long-c"].groups("dot-product", "w256-h4-steps1600", width_trend.ALIASES)[-1] == (
        "synthesizer",
        "dot-product",
        "h4-lr5e-4-steps1600",
    )
    # the control: (a)'s dot product at width 384 as the rule's cell, but at talking heads' rate there, seed 0
    lrs = width_trend.LONG_LR[(384, "a")]
    rule_dot = by_id[f"width_trend/dot-product/{width_trend.long_size(384, 'a', lrs['dot-product'])}/seed0"]
    th_lr = lrs["talking-heads"]
    assert (control.variant, control.seed, control.config["training"]["learning_rate"]) == ("dot-product", 0, th_lr)
    assert control.overrides == rule_dot.overrides and th_lr != rule_dot.config["training"]["learning_rate"]
    assert {k: v for k, v in control.config["training"].items() if k != "learning_rate"} == {
        k: v for k, v in rule_dot.config["training"].items() if k != "learning_rate"
    }
    assert [size for _, size in tables["width-control-a-w384"].columns] == [rule_dot.size, control.size]
    others = [size for name, t in tables.items() if name != "width-control-a-w384" for _, size in t.columns]
    assert control.size not in others  # the long table and the figure keep the rule's cells
    (trend,) = width_trend.TRENDS  # the page's figure: both long tables, against the widths
    assert trend.tables == (("(a) ", tables["width-long-a"]), ("(c) ", tables["width-long-c"]))
    assert trend.xs == (128, 256, 384) and [label for label, _ in tables["width-long-a"].columns] == [
        f"width {w} ({w // 64} layers)" for w in trend.xs
    ]


def test_width_trend_screen_picks_follow_the_rule():
    """As test_screen_picks_follow_the_rule, per (width, claim): SCREEN_PICK is what the rule picks from the
    committed results (None while a rate has no row); the long cells train at it."""
    import width_trend

    rows = results_file.load_results(results_file.RESULTS)
    for (width, claim), picks in width_trend.SCREEN_PICK.items():
        table = next(t for t in width_trend.TABLES if t.name == f"width-screen-{claim}-w{width}")
        sizes = dict(zip(cells.SCREEN_LRS, (size for _, size in table.columns)))
        for variant, picked in picks.items():
            rule = report.screen_pick(rows, table, variant, sizes, width_trend.ALIASES, cells.PENDING_LR)
            assert picked == rule, (width, claim, variant)
            lr = cells.PENDING_LR if picked is None else picked
            assert any(
                c.variant == variant and c.size == width_trend.long_size(width, claim, lr) for c in width_trend.CELLS
            )


def test_length_cells_repeat_the_long_cells_at_four_times_the_steps():
    """Claim (e): each contrast at its claim's long-cell setting and learning rate, 6400 steps, the warm-up a ratio
    (scaled as the long cells scale theirs), evaluated every 400 steps; the warm-up control keeps 160 warm-up steps,
    the learning-rate control runs claim (c)'s pair each at the other's rate."""
    import length
    import synthesizer
    import talking_heads

    by_id = {c.id: c for c in length.CELLS}
    assert len(by_id) == len(length.CELLS) == 16
    swapped = {"length/dot-product/h4-lr1e-3-steps6400/seed0", "length/mixture-random-dot/h4-lr5e-4-steps6400/seed0"}
    assert [c.id for c in length.CELLS[-2:]] == sorted(swapped)  # the learning-rate control, last

    def long_cell(variant, c):  # the claim's own 1600-step cell of this variant, seed and head count
        claim = talking_heads if c.size.startswith("h16") else synthesizer
        return next(
            x
            for x in claim.CELLS
            if x.variant == variant
            and x.seed == c.seed
            and x.size.endswith("steps1600")
            and x.size.startswith(c.size.split("-")[0])
        )

    other = {"dot-product": "mixture-random-dot", "mixture-random-dot": "dot-product"}
    for c in length.CELLS:
        training = c.config["training"]
        assert training["max_steps"] == 6400 and training["eval_steps"] == 400
        own = long_cell(c.variant, c)
        assert dict(c.overrides) == dict(own.overrides) and c.preset == own.preset
        rate = own.config["training"]["learning_rate"]
        if c.id in swapped:  # the control: the other variant's rate, which is not its own
            rate, own_rate = long_cell(other[c.variant], c).config["training"]["learning_rate"], rate
            assert rate != own_rate
        assert training["learning_rate"] == rate
        expected_warmup = 160 if c.size.endswith("warmup160") else cells.TRAINING["warmup_steps"]
        assert training["warmup_steps"] == expected_warmup
    assert {c.seed for c in length.CELLS if "warmup" in c.size} == {0}
    assert "length" in report.CLAIMS


def test_attention_reach_measures_offsets_of_known_maps():
    """experiments/attention_reach.py: the mass by offset of maps whose answer is known."""
    import attention_reach

    n = 10
    self_only = torch.eye(n)[None, None]
    previous = torch.zeros(n, n)
    previous[0, 0] = 1.0  # the first token has no previous one
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    uniform = torch.full((1, 2, n, n), 1.0 / n)
    assert attention_reach.reach(self_only) == pytest.approx(
        {"self": 1, "-1": 0, "+1": 0, "0<|d|<=3": 0, "mean |d|": 0, "[CLS]": 1 / n, "entropy": 0}
    )
    got = attention_reach.reach(previous[None, None])
    assert got["-1"] == pytest.approx((n - 1) / n) and got["self"] == pytest.approx(1 / n)
    assert got["0<|d|<=3"] == pytest.approx((n - 1) / n) and got["mean |d|"] == pytest.approx((n - 1) / n)
    assert got["[CLS]"] == pytest.approx(2 / n) and got["entropy"] == pytest.approx(0)  # rows 0 and 1 read key 0
    mean_offset = sum(abs(i - j) for i in range(n) for j in range(n)) / n / n
    got = attention_reach.reach(uniform)
    assert got["mean |d|"] == pytest.approx(mean_offset) and got["entropy"] == pytest.approx(math.log(n))
    halves = torch.cat([uniform[:, :1], self_only], 1)  # one uniform head, one on itself: the heads averaged
    assert attention_reach.reach(halves)["entropy"] == pytest.approx(math.log(n) / 2)


def test_attention_reach_reads_a_saved_mixture(tmp_path):
    """A saved Random + dot-product mixture with the committed tokenizer: one row per layer, the mixture's weights
    (uniform at initialisation, summing to one) beside them, the held-out windows as long as asked."""
    from transformers import AutoTokenizer

    import attention_reach
    import hf_attn_variants as hav

    tokenizer = AutoTokenizer.from_pretrained(kjv.TOKENIZER)
    config = hav.VariantBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, attention_type="synthesizer", synthesizer_components=["dot_product", "random"],
    )  # fmt: skip
    hav.VariantBertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    windows = attention_reach.held_out_windows(tokenizer, 3, 32)
    assert windows.shape == (3, 32) and (windows[:, 0] == tokenizer.cls_token_id).all()
    assert (windows[:, -1] == tokenizer.sep_token_id).all()
    lines = attention_reach.describe(tmp_path, sequences=2, length=32).splitlines()
    assert "['dot_product', 'random']" in lines[0] and lines[1].split()[-1] == "alpha"
    layers = [line.split() for line in lines[2:]]
    assert [row[0] for row in layers] == ["0", "1", "2"]
    assert all(float(row[-2]) == pytest.approx(0.5) and float(row[-1]) == pytest.approx(0.5) for row in layers)
    per_head = [line.split()[0] for line in attention_reach.describe(tmp_path, 2, 32, per_head=True).splitlines()[2:]]
    assert per_head == ["0", "0.0", "0.1", "1", "1.0", "1.1", "2", "2.0", "2.1"]
    with pytest.raises(FileNotFoundError, match="config.json"):
        attention_reach.describe(tmp_path / "missing", sequences=2, length=32)


def test_random_maps_offset_only_keeps_what_depends_on_the_offset():
    """experiments/random_maps.py's edits: a map that depends only on the offset j - i is left as it is; any other
    becomes one, each diagonal its mean; with a band, every offset beyond it shares one logit."""
    import random_maps

    n = 6
    d = random_maps.offsets(n)
    relative = torch.stack([torch.exp(-d.abs().double()), (d == -1).double() * 2.0])  # two heads, [2, n, n]
    assert torch.allclose(random_maps.offset_only(relative), relative)
    absolute = torch.randn(2, n, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    edited = random_maps.offset_only(absolute)
    for offset in range(-(n - 1), n):
        diagonal = d == offset
        assert torch.allclose(edited[:, diagonal], absolute[:, diagonal].mean(-1, keepdim=True))
    banded = random_maps.offset_only(absolute, band=1)
    far = d.abs() > 1
    assert torch.allclose(banded[:, ~far], edited[:, ~far])
    assert torch.allclose(banded[:, far], absolute[:, far].mean(-1, keepdim=True))
    assert not torch.allclose(banded, edited)
    profile = random_maps.offset_profile(relative)  # offsets -3 ... +3, minus the mean beyond 3
    beyond = relative[0][d.abs() > 3].mean()
    assert profile[0].tolist() == pytest.approx([math.exp(-abs(k)) - float(beyond) for k in range(-3, 4)])
    assert profile[1].tolist() == pytest.approx([0, 0, 2, 0, 0, 0, 0])


def test_random_maps_edits_a_saved_mixture(tmp_path):
    """End to end on a saved Random + dot-product mixture whose Random maps are a strong function of the offset:
    the offset-only edit leaves the held-out loss as trained (the maps are unchanged), the uniform one moves it;
    the evaluation is the training script's own."""
    from transformers import AutoTokenizer

    import hf_attn_variants as hav
    import random_maps

    tokenizer = AutoTokenizer.from_pretrained(kjv.TOKENIZER)
    config = hav.VariantBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, attention_type="synthesizer", synthesizer_components=["dot_product", "random"],
        initializer_range=0.5,  # weights large enough that what attention reads moves the loss
    )  # fmt: skip
    model = hav.VariantBertForMaskedLM(config)
    d = random_maps.offsets(32)
    with torch.no_grad():
        for core in random_maps.random_cores(model):
            core.random_logits.copy_(torch.stack([(d == -1) * 8.0, (d.abs() <= 2) * 4.0]))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    lines = random_maps.describe(tmp_path, None, [], max_seq_length=32, max_eval_samples=8).splitlines()
    losses = {line[:28].strip(): float(line[28:]) for line in lines[1:4]}
    assert list(losses) == ["as trained", "uniform", "offset only"]
    assert losses["offset only"] == pytest.approx(losses["as trained"], abs=1e-4)
    assert abs(losses["uniform"] - losses["as trained"]) > 1e-3
    assert lines[5].split() == ["head", "-3", "-2", "-1", "+0", "+1", "+2", "+3"]
    assert [float(v) for v in lines[6].split()[1:]] == pytest.approx([0, 0, 8, 0, 0, 0, 0])  # head 0.0
    with pytest.raises(ValueError, match="layers 0-1"):
        random_maps.describe(tmp_path, [2], [], max_seq_length=32, max_eval_samples=8)
    config.attention_type = "dot_product"
    hav.VariantBertForMaskedLM(config).save_pretrained(tmp_path / "dot")
    tokenizer.save_pretrained(tmp_path / "dot")
    with pytest.raises(ValueError, match="no Random synthesizer component"):
        random_maps.describe(tmp_path / "dot", None, [], max_seq_length=32, max_eval_samples=8)
