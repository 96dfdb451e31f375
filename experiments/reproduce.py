"""Re-run a recorded cell from its results row and compare: the row's own `train_command`, run from the repository
root in a scratch cache (`HF_ATTN_VARIANTS_CACHE` and `HF_DATASETS_CACHE` in a new temporary folder, so nothing
cached earlier is reused: the KJV files, the project tokenizer when the row used one, the prepared data), writing
to a temporary output folder. It prints the recorded and the new eval loss, their difference, and whether the
tokenizer and the training text are those the row recorded.

    nice -n 19 python experiments/reproduce.py talking_heads/dot-product/h16-lr1e-3/seed0
    python experiments/reproduce.py <cell id> --results path/to/results.jsonl --keep
    python experiments/reproduce.py <cell id> --at_row_commit    # the code of the row's own commit

By default the command runs with the code of this checkout, which may be newer than the row's: a change that
computes the same thing another way (another order of float operations, another draw of the dropout masks) moves
a re-run as another CPU does. `--at_row_commit` runs it in a temporary git worktree of the commit the row records
(its `git_commit`; refused for a row made from uncommitted code), with that worktree first on PYTHONPATH.

`--until_step N` stops the re-run at step N and compares the row's eval curve there (a long row checked in minutes):
the command runs as recorded, with a checkpoint at step N added (saving draws no random numbers, so the run is the
same), and is stopped once that checkpoint's trainer_state.json holds the evaluation at step N.

    nice -n 19 python experiments/reproduce.py length/dot-product/h16-lr1e-3-steps6400/seed0 --until_step 400

Rows made before the tokenizer was deterministic (those without `tokenizer_sha256`) trained with a WordPiece that
was never recorded and cannot be rebuilt: their re-run trains with today's project tokenizer and is not expected
to match.
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cells import EVAL_METRICS, SCRIPT, current_command
from provenance import ROOT, sha256
from results_file import RESULTS, load_results

_OUTPUT_DIR = re.compile(r"--output_dir ('[^']*'|\S+)")


def find_row(rows: list[dict], cell_id: str) -> dict:
    """The last row of `cell_id` (a cell run again appends a newer row)."""
    matching = [row for row in rows if row.get("id") == cell_id]
    if not matching:
        near = sorted(row["id"] for row in rows if "id" in row and cell_id.split("/")[0] in row["id"])[:5]
        raise ValueError(
            f"No results row has id {cell_id!r}; ids look like {near or 'claim/variant/size/seedN'} "
            "(python experiments/<claim>.py --list shows them)."
        )
    return matching[-1]


def reproduce_command(row: dict, output_dir: str | os.PathLike, until_step: int | None = None) -> str:
    """The row's train_command writing to `output_dir` instead of its recorded folder; with `until_step`, also a
    checkpoint at that step (its --save_strategy replaced)."""
    command = current_command(row.get("train_command") or "")
    if not command or len(_OUTPUT_DIR.findall(command)) != 1:
        raise ValueError(f"Row {row.get('id')!r} has no train_command with one --output_dir: it cannot be re-run.")
    command = _OUTPUT_DIR.sub(lambda _: "--output_dir " + shlex.quote(str(output_dir)), command)
    if until_step is None:
        return command
    command = re.sub(r" --save_strategy \S+", "", command)
    return f"{command} --save_strategy steps --save_steps {until_step} --save_total_limit 1"


def recorded_at(row: dict, step: int) -> float:
    """The row's held-out loss at `step` of its eval curve; an error naming the steps it has."""
    curve = {point[0]: point[1] for point in row.get("eval_curve") or []}
    if step not in curve or curve[step] is None:
        raise ValueError(
            f"Row {row.get('id')!r} has no evaluation at step {step}: choose --until_step from its eval curve's "
            f"steps {sorted(curve) or 'none (the row keeps no curve)'}."
        )
    return curve[step]


def checkpoint_eval(output_dir: Path, step: int, metric: str) -> float | None:
    """The evaluation at `step` in output_dir/checkpoint-<step>/trainer_state.json, None while it is not written."""
    try:
        history = json.loads((output_dir / f"checkpoint-{step}" / "trainer_state.json").read_text())["log_history"]
    except (OSError, ValueError, KeyError):
        return None
    return next((h[metric] for h in history if h.get("step") == step and metric in h), None)


def run_until(command: list[str], cwd, env, log, output_dir: Path, step: int, metric: str) -> float:
    """Run `command` until its checkpoint at `step` holds the evaluation there; stop it (its process group) and
    return that loss. An error naming the log when it ends first."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while (value := checkpoint_eval(output_dir, step, metric)) is None:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"The re-run ended (exit {proc.returncode}) before its evaluation at step {step}; log {log.name}"
                )
            time.sleep(2)
        return value
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()


def row_commit(row: dict) -> str:
    """The commit a row's code can be checked out at; an error that says why not."""
    commit = row.get("git_commit")
    if not commit:
        raise ValueError(f"Row {row.get('id')!r} records no git_commit: run it without --at_row_commit.")
    if commit.endswith("+dirty"):
        raise ValueError(
            f"Row {row.get('id')!r} was made from uncommitted code ({commit}): no commit holds it; "
            "run it without --at_row_commit."
        )
    return commit


@contextlib.contextmanager
def checkout(commit: str | None, scratch: Path):
    """The folder to run from: ROOT, or (with a commit) a temporary git worktree of it, removed afterwards."""
    if commit is None:
        yield ROOT
        return
    tree = scratch / "code"
    made = subprocess.run(
        ["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, capture_output=True, text=True
    )
    if made.returncode != 0:
        raise ValueError(
            f"git cannot check out the row's commit {commit} in {ROOT}: {made.stderr.strip()} (fetch "
            "it, or run without --at_row_commit)."
        )
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


def reproduce(row: dict, scratch: Path, at_row_commit: bool = False, until_step: int | None = None) -> dict:
    """Run the row's command in `scratch` (caches and output), from this checkout or the row's commit, to its end
    or to `until_step`; the recorded and new figures."""
    output_dir = scratch / "output"
    commit = row_commit(row) if at_row_commit else None
    metric = EVAL_METRICS[row.get("config", {}).get("script", SCRIPT)]  # the row's eval_loss: its script's metric
    command = reproduce_command(row, output_dir, until_step)
    with checkout(commit, scratch) as tree:
        env = {
            **os.environ,
            "HF_ATTN_VARIANTS_CACHE": str(scratch / "cache"),
            "HF_DATASETS_CACHE": str(scratch / "datasets"),
            "PYTHONUNBUFFERED": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # `python`: ours
            "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
        }
        with open(scratch / "log.txt", "w") as log:
            if until_step is None:
                proc = subprocess.run(["bash", "-c", command], cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
            else:
                new = run_until(["bash", "-c", command], tree, env, log, output_dir, until_step, metric)
    if until_step is None:
        if proc.returncode != 0:
            tail = (scratch / "log.txt").read_text()[-2000:]
            raise RuntimeError(f"The re-run failed (exit {proc.returncode}); log {scratch / 'log.txt'}:\n{tail}")
        new = json.loads((output_dir / "all_results.json").read_text()).get(metric)
        recorded, tokenizer = row.get("eval_loss"), output_dir / "tokenizer.json"
    else:  # stopped before the end: the checkpoint holds the tokenizer
        recorded, tokenizer = recorded_at(row, until_step), output_dir / f"checkpoint-{until_step}" / "tokenizer.json"
    return {
        "id": row["id"],
        "step": until_step,
        "recorded_eval_loss": recorded,
        "new_eval_loss": new,
        "difference": None if new is None or recorded is None else new - recorded,
        "recorded_tokenizer_sha256": row.get("tokenizer_sha256"),
        "new_tokenizer_sha256": sha256(tokenizer) if tokenizer.is_file() else None,
        "recorded_cpu": row.get("hardware", {}).get("cpu"),
        "recorded_commit": row.get("git_commit"),
        "code": commit or "this checkout",
    }


def report(result: dict) -> str:
    at = f" at step {result['step']}" if result.get("step") is not None else ""
    lines = [f"{result['id']}: recorded eval loss{at} {result['recorded_eval_loss']}, new {result['new_eval_loss']}"]
    if result["difference"] is not None:
        lines[0] += f", difference {result['difference']:+.4f}"
    recorded, new = result["recorded_tokenizer_sha256"], result["new_tokenizer_sha256"]
    if recorded is None:
        lines.append(f"tokenizer: not recorded in the row (made before tokenizers were recorded); new {new}")
    else:
        lines.append(f"tokenizer: {'the same' if recorded == new else 'DIFFERENT'} (recorded {recorded}, new {new})")
    lines.append(
        f"recorded on: {result['recorded_cpu']}, at commit {result['recorded_commit']}; re-run with the code "
        f"of {result['code']}"
    )
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell_id", help="the row's id, claim/variant/size/seedN")
    parser.add_argument("--results", default=str(RESULTS), help="the results file holding the row")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (caches, output, log)")
    parser.add_argument(
        "--at_row_commit",
        action="store_true",
        help="run with the code of the row's own commit (a temporary git worktree), not this checkout",
    )
    parser.add_argument(
        "--until_step",
        type=int,
        default=None,
        metavar="N",
        help="stop the re-run at step N and compare the row's eval curve there (a step the row evaluated at)",
    )
    args = parser.parse_args(argv)
    row = find_row(load_results(args.results), args.cell_id)
    if args.at_row_commit:
        row_commit(row)  # refused before anything is made
    if args.until_step is not None:
        recorded_at(row, args.until_step)  # likewise
    scratch = Path(tempfile.mkdtemp(prefix="reproduce-"))
    print(
        f"re-running {row['id']} in {scratch}:\n  {reproduce_command(row, scratch / 'output', args.until_step)}",
        flush=True,
    )
    try:
        result = reproduce(
            row, scratch, args.at_row_commit, args.until_step
        )  # a failed run keeps the scratch folder: its log says why
    except ValueError:  # the commit could not be checked out: nothing ran
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
